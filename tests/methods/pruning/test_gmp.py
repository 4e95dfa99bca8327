import pytest
import torch

from sparsebench.methods.pruning.gmp import GMP
from tests.methods.conftest import MaskWatcher


def _gmp(total=1000, **kw):
    ctx = type("C", (), {"total_steps": total})()
    return GMP(GMP.Params(**kw), 0.9, ctx)


def test_cubic_schedule_at_known_steps():
    g = _gmp()  # t0 = 250, end 750, dt = 100 -> n = 5 pruning intervals
    assert (g.t0, g.n_prunes) == (250, 5)
    assert g.sparsity_at(250) == pytest.approx(0.0)
    assert g.sparsity_at(350) == pytest.approx(0.9 * (1 - 0.8**3))
    assert g.sparsity_at(550) == pytest.approx(0.9 * (1 - 0.4**3))
    assert g.sparsity_at(750) == pytest.approx(0.9)
    assert g.sparsity_at(300) is None and g.sparsity_at(850) is None and g.sparsity_at(0) is None


def test_gmp_reaches_target_and_sparsity_never_decreases(tiny_fit):
    watcher = MaskWatcher()
    params = {"pruning_frequency": 4, "begin_fraction": 0.25, "end_fraction": 0.75}
    module, _ = tiny_fit("gmp", 0.8, params, epochs=4, extra_callbacks=[watcher])
    totals = [sum(n.values()) for n in watcher.nnz]
    assert all(a >= b for a, b in zip(totals, totals[1:]))
    assert module.masks.sparsity() == pytest.approx(0.8, abs=0.01)
    # removed weights never come back
    for a, b in zip(watcher.masks, watcher.masks[1:]):
        if a["0"] is not None and b["0"] is not None:
            assert not torch.any(b["0"] & ~a["0"])


def test_window_shorter_than_one_pruning_interval_is_refused():
    with pytest.raises(ValueError, match="shorter than pruning_frequency = 100"):
        _gmp(total=100).on_fit_start(None, None)
