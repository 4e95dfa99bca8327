import pytest
import torch
from torch import nn

from sparsebench.methods.pruning.gmp import GMP, MIN_PRUNING_STEPS
from sparsebench.suite.pillars.classification.masks import MaskStore
from tests.methods.conftest import MaskWatcher


def _gmp(total=1000, sparsity=0.9, **kw):
    ctx = type("C", (), {"total_steps": total})()
    return GMP(GMP.Params(**kw), sparsity, ctx)


def test_cubic_schedule_at_known_steps_with_a_fixed_interval():
    g = _gmp(total=2000, pruning_frequency=100)  # t0 = 500, end 1500 -> n = 10
    assert (g.t0, g.dt, g.n_prunes) == (500, 100, 10)
    assert g.sparsity_at(500) == pytest.approx(0.0)
    assert g.sparsity_at(600) == pytest.approx(0.9 * (1 - 0.9**3))
    assert g.sparsity_at(1000) == pytest.approx(0.9 * (1 - 0.5**3))
    assert g.sparsity_at(1500) == pytest.approx(0.9)
    assert g.sparsity_at(550) is None and g.sparsity_at(1600) is None and g.sparsity_at(0) is None


def test_min_pruning_steps_is_ten():
    assert MIN_PRUNING_STEPS == 10


def test_two_step_schedule_of_a_550_step_run_is_refused():
    # 550 steps, Δt = 100: t0 = int(137.5) = 137, t_end = int(412.5) = 412, window 275 steps,
    # n = 275 // 100 = 2: s = 0.875 s_f at 237 and s_f at 337, near one-shot.
    with pytest.raises(ValueError) as e:
        GMP.check_budget(GMP.Params(pruning_frequency=100), 550)
    msg = str(e.value)
    for part in ("2 pruning steps", "MIN_PRUNING_STEPS = 10", "t_0 = 137", "t_end = 412"):
        assert part in msg, (part, msg)
    assert "Δt = 100" in msg and "pruning_frequency: null" in msg and "<= 27" in msg
    # initial_sparsity > 0 makes t0 a pruning step too, but 3 is still too few.
    with pytest.raises(ValueError, match="3 pruning steps"):
        GMP.check_budget(GMP.Params(pruning_frequency=100, initial_sparsity=0.5), 550)
    # Δt = 27: n = 275 // 27 = 10 pruning steps, accepted.
    GMP.check_budget(GMP.Params(pruning_frequency=27), 550)
    with pytest.raises(ValueError, match="9 pruning steps"):
        GMP.check_budget(GMP.Params(pruning_frequency=28), 550)  # 275 // 28 = 9


def test_refused_at_fit_start_too():
    with pytest.raises(ValueError, match="0 pruning steps"):
        _gmp(total=100, pruning_frequency=100).on_fit_start(None, None)


def test_scaled_schedule_of_a_550_step_run():
    # Default (Δt scaled): n = 10, Δt = 275 // 10 = 27, pruning at 137 + 27k, k = 1..10.
    g = _gmp(total=550, sparsity=0.9)
    g.check_budget(g.params, 550)
    steps = [t for t in range(550) if (s := g.sparsity_at(t)) is not None and s > 0]
    assert steps == [164, 191, 218, 245, 272, 299, 326, 353, 380, 407]
    assert g.sparsity_at(164) == pytest.approx(0.9 * (1 - 0.9**3))  # 0.2439
    assert g.sparsity_at(407) == pytest.approx(0.9)
    # pruning_steps: 20 -> Δt = 275 // 20 = 13, last step 137 + 260 = 397.
    g20 = _gmp(total=550, pruning_steps=20)
    steps20 = [t for t in range(550) if (s := g20.sparsity_at(t)) is not None and s > 0]
    assert steps20 == list(range(150, 398, 13)) and len(steps20) == 20
    # A window of 6 steps fits at most 6 scaled pruning steps: refused.
    with pytest.raises(ValueError, match="6 pruning steps"):
        GMP.check_budget(GMP.Params(), 12)  # t0 = 3, t_end = 9


def test_both_pruning_frequency_and_pruning_steps_is_refused():
    with pytest.raises(ValueError, match="not both"):
        GMP.Params(pruning_frequency=10, pruning_steps=10).validate()
    with pytest.raises(ValueError, match="pruning_steps must be >= MIN_PRUNING_STEPS = 10"):
        GMP.Params(pruning_steps=9).validate()


def test_prunes_the_smallest_magnitudes_at_each_step_by_hand():
    # One 1x10 layer with |w| = 1..10 (positions shuffled), s_f = 0.9, pruning_steps 10 over a
    # window of 10 steps (total 20: t0 = 5, t_end = 15, Δt = 1). Densities by hand:
    # d_k = 1 - 0.9 (1 - (1 - k/10)^3) -> kept = round(10 d_k):
    #   k=1: 1-0.9*0.271=0.7561 -> 8   k=2: 1-0.9*0.488=0.5608 -> 6   k=3: 1-0.9*0.657=0.4087 -> 4
    #   k=4: 1-0.9*0.784=0.2944 -> 3   k=5: 1-0.9*0.875=0.2125 -> 2   k=6..10: <= 0.1576 -> 1-2
    #   k=6: 1-0.9*0.936=0.1576 -> 2   k=7: 1-0.9*0.973=0.1243 -> 1   k=8..10 -> 1
    mags = [3.0, 10.0, 1.0, 7.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0]
    signs = [1, -1, 1, -1, 1, 1, -1, 1, -1, 1]
    model = nn.Sequential(nn.Linear(10, 1, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[m * s for m, s in zip(mags, signs)]]))
    store = MaskStore(model)
    module = type("M", (), {"masks": store})()
    g = _gmp(total=20, sparsity=0.9, pruning_steps=10)
    assert (g.t0, g.dt, g.n_prunes) == (5, 1, 10)
    kept_by_hand = {6: 8, 7: 6, 8: 4, 9: 3, 10: 2, 11: 2, 12: 1, 13: 1, 14: 1, 15: 1}
    for step in range(20):
        g.on_train_batch_start(type("T", (), {"global_step": step})(), module, None, 0)
        mask = store.masks["0"]
        if step < 6:
            assert mask is None, step
            continue
        k = kept_by_hand[min(step, 15)]
        # the k largest magnitudes survive: |w| in {10, 9, ..., 11 - k}
        expected = [m > 10 - k for m in mags]
        assert mask[0].tolist() == expected, (step, mask[0].tolist())
    assert mask[0].tolist() == [False, True] + [False] * 8  # only |w| = 10 (position 1) left


def test_pruned_weights_never_return_even_if_they_would_rank_first():
    # A pruned position whose weight is later large (as if training moved it) stays pruned.
    model = nn.Sequential(nn.Linear(4, 1, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[4.0, 3.0, 2.0, 1.0]]))
    store = MaskStore(model)
    module = type("M", (), {"masks": store})()
    g = _gmp(total=40, sparsity=0.75, pruning_steps=10)  # t0 = 10, Δt = 2
    # k=1: d = 1 - 0.75*0.271 = 0.79675 -> round(3.187) = 3 kept: position 3 (|w| = 1) goes.
    g.on_train_batch_start(type("T", (), {"global_step": 12})(), module, None, 0)
    assert store.masks["0"][0].tolist() == [True, True, True, False]
    with torch.no_grad():
        model[0].weight[0, 3] = 100.0  # masked position, large value
        model[0].weight[0, 0] = 0.1
    # k=2: d = 1 - 0.75*0.488 = 0.634 -> round(2.536) = 3 kept: still positions 0-2.
    g.on_train_batch_start(type("T", (), {"global_step": 14})(), module, None, 0)
    assert store.masks["0"][0].tolist() == [True, True, True, False]
    # k=3: d = 1 - 0.75*0.657 = 0.50725 -> round(2.029) = 2 kept: |w| 3, 2; 0.1 goes, 100 stays out.
    g.on_train_batch_start(type("T", (), {"global_step": 16})(), module, None, 0)
    assert store.masks["0"][0].tolist() == [False, True, True, False]


def test_gmp_reaches_target_and_sparsity_never_decreases(tiny_fit):
    watcher = MaskWatcher()
    # 40 steps: t0 = 10, t_end = 30, Δt = 2 (scaled, 10 pruning steps)
    module, method = tiny_fit("gmp", 0.8, {}, epochs=4, extra_callbacks=[watcher])
    assert (method.t0, method.dt, method.n_prunes) == (10, 2, 10)
    totals = [sum(n.values()) for n in watcher.nnz]
    assert all(a >= b for a, b in zip(totals, totals[1:]))
    # the nnz total changes exactly at the pruning steps t0 + 2k, k = 1..10 (watcher index = step)
    changes = [i for i in range(1, len(totals)) if totals[i] != totals[i - 1]]
    assert changes == list(range(12, 31, 2))
    assert module.masks.sparsity() == pytest.approx(0.8, abs=0.01)
    # removed weights never come back
    for a, b in zip(watcher.masks, watcher.masks[1:]):
        if a["0"] is not None and b["0"] is not None:
            assert not torch.any(b["0"] & ~a["0"])


def test_refusal_names_the_kind_of_interval_and_the_fix():
    # fixed Δt = 100 on 550 steps: the bound is 275 // 10 = 27, an integer
    with pytest.raises(ValueError) as e:
        GMP.check_budget(GMP.Params(pruning_frequency=100), 550)
    assert "fixed pruning_frequency" in str(e.value)
    assert "pruning_frequency <= 27, or train at least 1999 steps (the recipe has 550)" in str(
        e.value
    )  # 1999: int(0.75 · 1999) − int(0.25 · 1999) = 1,000 = 10 Δt; 1998 gives 999
    # 20 steps: window 5..15 of exactly MIN_PRUNING_STEPS = 10 steps, Δt = 2 -> n = 5; a
    # Δt <= 10 // 10 = 1 would fit, so the fix is that Δt, not a wider window
    with pytest.raises(ValueError) as e:
        GMP.check_budget(GMP.Params(pruning_frequency=2), 20)
    assert "pruning_frequency <= 1, or" in str(e.value) and "widen" not in str(e.value)
    # scaled Δt on 12 steps: window 3..9 (6 steps) is narrower than 10 pruning steps
    with pytest.raises(ValueError) as e:
        GMP.check_budget(GMP.Params(), 12)
    assert "scaled pruning_frequency" in str(e.value)
    # window 0.25-0.75: 19 steps make it 4..14, exactly 10 (18: 4..13)
    fix = "widen the window (begin_fraction, end_fraction) or train at least 19 steps"
    assert fix + " (the recipe has 12) at this window" in str(e.value)
    # 8 steps: no window of this run has 10 steps, so widening is not offered
    with pytest.raises(ValueError) as e:
        GMP.check_budget(GMP.Params(), 8)
    assert "widen" not in str(e.value) and "train at least 19 steps" in str(e.value)
    # window 0.1-0.8: 14 steps give 1..11 (13: 1..9)
    assert (
        "at least 14 steps"
        in pytest.raises(
            ValueError, GMP.check_budget, GMP.Params(begin_fraction=0.1, end_fraction=0.8), 9
        ).value.args[0]
    )
    # a fixed Δt = 5 needs a window of 50 steps: 99 (74 − 24); with s_i > 0 the step at t_0
    # counts too, so 45 steps (90: 67 − 22) do
    for params, needed in [
        (GMP.Params(pruning_frequency=5), 99),
        (GMP.Params(pruning_frequency=5, initial_sparsity=0.3), 90),
    ]:
        assert GMP.steps_needed(params) == needed
        GMP.check_budget(params, needed)
        with pytest.raises(ValueError, match=f"train at least {needed} steps"):
            GMP.check_budget(params, needed - 1)


def test_a_window_of_one_interval_prunes_once_to_the_target():
    g = _gmp(total=2000, pruning_frequency=1000)  # t0 = 500, t_end = 1500: n = 1
    assert (g.t0, g.dt, g.n_prunes) == (500, 1000, 1)
    assert g.sparsity_at(500) == pytest.approx(0.0)
    assert g.sparsity_at(1500) == pytest.approx(0.9)
    assert g.sparsity_at(1000) is None


def test_dense_first_layer_keeps_the_first_layer_whole():
    model = nn.Sequential(nn.Linear(10, 10, bias=False), nn.Linear(10, 10, bias=False))
    store = MaskStore(model)
    module = type("M", (), {"masks": store})()
    g = _gmp(total=20, sparsity=0.5, pruning_steps=10, distribution="uniform",
             dense_first_layer=True)  # fmt: skip
    g.on_train_batch_start(type("T", (), {"global_step": 15})(), module, None, 0)
    first = store.masks["0"]
    assert first is None or bool(first.all())
    assert store.masks["1"] is not None and not bool(store.masks["1"].all())


def test_an_initial_sparsity_at_or_above_the_target_is_refused():
    from sparsebench.methods.pruning.movement import Movement

    with pytest.raises(ValueError, match="initial_sparsity 0.95 must be below the target"):
        GMP.check_sparsity(GMP.Params(initial_sparsity=0.95), 0.9)
    GMP.check_sparsity(GMP.Params(initial_sparsity=0.5), 0.9)
    with pytest.raises(ValueError, match="a target sparsity of 0.0 leaves nothing to prune"):
        GMP.check_sparsity(GMP.Params(), 0.0)
    with pytest.raises(ValueError, match="set pruning_frequency: null with it"):
        Movement.Params(pruning_steps=10).validate()


@pytest.mark.parametrize("pruning_frequency", [None, 1, 3])
@pytest.mark.parametrize("initial_sparsity", [0.0, 0.3])
def test_steps_needed_is_the_fewest_by_a_search_from_one(pruning_frequency, initial_sparsity):
    from sparsebench.methods.pruning.gmp import MIN_PRUNING_STEPS

    for b, e in [(0.0, 1.0), (0.05, 0.1), (0.1, 0.8), (0.25, 0.75), (0.3, 0.9)]:
        params = GMP.Params(begin_fraction=b, end_fraction=e, initial_sparsity=initial_sparsity,
                            pruning_frequency=pruning_frequency)  # fmt: skip
        total = 1
        while GMP.pruning_step_count(params, GMP.schedule(params, total)[3]) < MIN_PRUNING_STEPS:
            total += 1
        assert GMP.steps_needed(params) == total, (b, e)
