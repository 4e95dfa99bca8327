import pytest

from sparsebench.methods.pruning.progressive import ProgressiveMagnitude
from tests.methods.conftest import MaskWatcher


def _method(total_steps=100, sparsity=0.9, **params):
    ctx = type("C", (), {"total_steps": total_steps})()
    return ProgressiveMagnitude(ProgressiveMagnitude.Params(**params), sparsity, ctx)


def test_the_schedule_is_linear_from_the_start_to_three_quarters():
    # 100 steps: window 0-75, n = 20, Δt = 3: s = 0.9 k / 20 at step 3k, k = 1..20
    m = _method()
    assert m.sparsity_at(3) == pytest.approx(0.045)
    assert m.sparsity_at(30) == pytest.approx(0.45)
    assert m.sparsity_at(60) == pytest.approx(0.9)
    assert m.sparsity_at(4) is None and m.sparsity_at(63) is None
    steps = [t for t in range(101) if (m.sparsity_at(t) or 0) > 0]
    assert len(steps) == 20
    diffs = {round(m.sparsity_at(b) - m.sparsity_at(a), 9) for a, b in zip(steps, steps[1:])}
    assert diffs == {0.045}  # equal increments: linear, not GMP's cubic


def test_an_initial_sparsity_is_reached_at_t0_and_defaults_are_stated():
    m = _method(initial_sparsity=0.5, begin_fraction=0.2)
    assert m.sparsity_at(20) == pytest.approx(0.5)
    p = ProgressiveMagnitude.Params()
    assert (p.begin_fraction, p.end_fraction, p.pruning_steps, p.distribution) == (
        0.0, 0.75, 20, "global",
    )  # fmt: skip
    with pytest.raises(ValueError, match="progressive_magnitude: 5 pruning steps"):
        ProgressiveMagnitude.check_budget(ProgressiveMagnitude.Params(pruning_frequency=15), 100)


def test_a_real_fit_prunes_monotonically_to_the_target(tiny_fit):
    watcher = MaskWatcher()
    module, _ = tiny_fit("progressive_magnitude", 0.8, epochs=4, extra_callbacks=[watcher])
    nnz = [sum(step.values()) for step in watcher.nnz]
    assert nnz == sorted(nnz, reverse=True) and len(set(nnz)) >= 10
    assert module.masks.sparsity() == pytest.approx(0.8, abs=0.005)
    # a removed weight never returns
    first = next(m for m in watcher.masks if m["0"] is not None)["0"]
    assert not bool((module.masks.masks["0"] & ~first).any())
