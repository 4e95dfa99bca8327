"""Topology updates of a values-only layer: values and optimizer state follow their positions
(a hand-built 4×4 case under SGD with momentum and Adam), growth by rejection sampling is
uniform over the free positions and never picks a taken one."""

import pytest
import torch
from scipy import stats

from sparsebench.kernels import SparseLinear, SparsityPattern
from sparsebench.kernels.topology import grow_random, remap, set_pattern

# 4×4 weight; the old pattern holds positions 0, 5, 6, 10, 15 (row * 4 + col)
OLD = torch.tensor([0, 5, 6, 10, 15])
NEW = torch.tensor([0, 3, 6, 12, 15])  # 0, 6, 15 kept; 5, 10 dropped; 3, 12 grown


def _layer():
    mask = torch.zeros(16, dtype=torch.bool)
    mask[OLD] = True
    layer = SparseLinear(mask.view(4, 4), bias=False)
    with torch.no_grad():
        layer.values.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
    return layer


def test_from_flat_equals_from_mask():
    mask = torch.zeros(16, dtype=torch.bool)
    mask[NEW] = True
    a, b = SparsityPattern.from_flat((4, 4), NEW), SparsityPattern.from_mask(mask.view(4, 4))
    for (name, x), y in zip(a.tensors().items(), b.tensors().values(), strict=True):
        assert torch.equal(x, y), name
    with pytest.raises(ValueError, match="strictly increasing"):
        SparsityPattern.from_flat((4, 4), torch.tensor([3, 3]))
    with pytest.raises(ValueError, match="inside shape"):
        SparsityPattern.from_flat((4, 4), torch.tensor([16]))


def test_remap_by_hand():
    out = remap(OLD, NEW, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), torch.tensor([9.0] * 5))
    assert out.tolist() == [1.0, 9.0, 3.0, 9.0, 5.0]


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_values_and_state_follow_their_positions(opt):
    layer = _layer()
    if opt == "sgd":
        optimizer = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    else:
        optimizer = torch.optim.Adam(layer.parameters(), lr=0.1)
    layer(torch.ones(2, 4)).pow(2).sum().backward()
    optimizer.step()
    before = layer.values.detach().clone()
    state = {k: v.clone() for k, v in optimizer.state[layer.values].items()}
    param = layer.values
    kept = set_pattern(layer, NEW, torch.tensor([0.0, 7.0, 0.0, 8.0, 0.0]), optimizer).kept
    assert kept.tolist() == [True, False, True, False, True]
    assert layer.values is param  # same nnz: rewritten in place
    # old order 0, 5, 6, 10, 15 -> new 0, 3, 6, 12, 15: positions 0, 6, 15 keep their slots
    assert layer.values.tolist() == pytest.approx(
        [before[0].item(), 7.0, before[2].item(), 8.0, before[4].item()]
    )
    for k, v in optimizer.state[layer.values].items():
        if v.dim() == 1:
            ref = [float(state[k][0]), 0.0, float(state[k][2]), 0.0, float(state[k][4])]
            assert v.tolist() == pytest.approx(ref)
    assert torch.equal(layer.flat_index, NEW) and int(layer.row_ptr[-1]) == 5
    w = layer.dense_weight().detach().view(-1)
    assert set(w.nonzero().squeeze(1).tolist()) <= set(NEW.tolist())
    optimizer.zero_grad()
    layer(torch.ones(2, 4)).pow(2).sum().backward()  # the new pattern trains on
    optimizer.step()


def test_another_nnz_swaps_the_parameter_in_the_optimizer():
    layer = _layer()
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1)
    layer(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    m = optimizer.state[layer.values]["exp_avg"].clone()
    old = layer.values
    set_pattern(layer, torch.tensor([5, 15]), 0.0, optimizer)  # a pruning step: 0, 6, 10 go
    assert layer.values is not old and layer.values.tolist() == pytest.approx([1.9, 4.9])
    assert optimizer.param_groups[0]["params"][0] is layer.values
    assert optimizer.state[layer.values]["exp_avg"].tolist() == pytest.approx(
        [float(m[1]), float(m[4])]
    )
    assert old not in optimizer.state


def test_growth_never_repeats_or_takes_a_taken_position():
    g = torch.Generator().manual_seed(0)
    taken = torch.tensor([0, 2, 3, 7, 8, 9, 15, 19])
    for _ in range(200):
        new = grow_random(taken, 20, 5, g)
        assert new.numel() == 5 and torch.unique(new).numel() == 5
        assert not bool(torch.isin(new, taken).any())
    assert grow_random(taken, 20, 12, g).tolist() == sorted(set(range(20)) - set(taken.tolist()))
    with pytest.raises(ValueError, match="cannot grow 13 connections: 12 of 20"):
        grow_random(taken, 20, 13, g)


def test_growth_is_uniform_over_the_free_positions():
    g = torch.Generator().manual_seed(1)
    taken = torch.tensor([1, 4, 5, 6, 11, 13, 17, 18])
    free = sorted(set(range(20)) - set(taken.tolist()))
    counts = torch.zeros(20)
    for _ in range(3000):
        counts[grow_random(taken, 20, 3, g)] += 1
    observed = counts[free]
    assert float(counts[taken].sum()) == 0.0
    # 9000 draws over 12 free positions: 750 expected each
    assert stats.chisquare(observed.numpy()).pvalue > 0.001


@pytest.mark.parametrize("chunk_rows", [1, 3, 7, None])
def test_chunked_growth_scores_equal_the_dense_criterion(chunk_rows):
    from sparsebench.kernels.topology import top_outer_abs
    from sparsebench.methods.dst.rigl import RigL

    g = torch.Generator().manual_seed(3)
    # integer-valued inputs (plus a per-column offset against ties): chunks equal the full
    # matmul entry for entry
    grad_y = torch.randint(-5, 6, (8, 7), generator=g).double()
    x = torch.randint(-5, 6, (8, 11), generator=g).double() + 0.001 * torch.arange(11)
    weight = torch.randn(7, 11, generator=g, dtype=torch.float64)
    mask = torch.rand(7, 11, generator=g) < 0.3
    new_mask = RigL.update_mask(weight, mask, grad_y.T @ x, 0.3)  # today's dense path
    n_active = int(mask.sum())
    k = int(0.3 * n_active)
    # the kept set is the top (n - k) magnitudes; what RigL grew is the rest of new_mask
    vals = weight.reshape(-1)[mask.reshape(-1)]
    flat = mask.reshape(-1).nonzero().squeeze(1)
    kept = torch.sort(flat[torch.topk(vals.abs(), n_active - k).indices]).values
    grown = top_outer_abs(grad_y, x, k, kept, chunk_rows)
    assert grown.numel() == k
    expect = new_mask.reshape(-1).nonzero().squeeze(1)
    assert torch.equal(torch.sort(torch.cat([kept, grown])).values, expect)


def test_chunked_growth_returns_only_free_positions():
    from sparsebench.kernels.topology import top_outer_abs

    grad_y, x = torch.ones(2, 2), torch.ones(2, 3)
    assert top_outer_abs(grad_y, x, 4, torch.tensor([0, 1, 2, 4]), 1).tolist() == [3, 5]


def test_fresh_positions_restart_even_if_they_were_kept():
    layer = _layer()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    layer(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    buf = optimizer.state[layer.values]["momentum_buffer"].clone()
    before = layer.values.detach().clone()
    # 6 was in the old pattern: dropped and regrown at once, it restarts at its new value
    kept = set_pattern(layer, NEW, torch.tensor([0.0, 7.0, 6.5, 8.0, 0.0]), optimizer,
                       fresh=torch.tensor([3, 6, 12])).kept  # fmt: skip
    assert kept.tolist() == [True, False, False, False, True]
    assert layer.values.tolist() == pytest.approx(
        [float(before[0]), 7.0, 6.5, 8.0, float(before[4])]
    )
    m = optimizer.state[layer.values]["momentum_buffer"]
    assert m.tolist() == pytest.approx([float(buf[0]), 0.0, 0.0, 0.0, float(buf[4])])


def test_the_backward_observer_sees_the_operands_of_the_weight_gradient():
    layer = _layer()
    seen = []
    layer.backward_observer = lambda gy, x: seen.append((gy.clone(), x.clone()))
    x = torch.randn(2, 3, 4)
    layer(x).pow(2).sum().backward()
    ((gy, xs),) = seen
    assert xs.shape == (6, 4) and torch.equal(xs, x.reshape(6, 4))
    dense = layer.dense_weight().detach()
    torch.testing.assert_close(gy, 2 * (x.reshape(6, 4) @ dense.T))
    # the values' gradient is that dense gradient on the pattern
    torch.testing.assert_close(layer.values.grad, (gy.T @ xs).reshape(-1)[layer.flat_index])


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_rigl_on_values_chooses_what_rigl_on_masks_chooses(optimizer):
    from sparsebench.methods.dst.rigl import RigL

    g = torch.Generator().manual_seed(7)
    mask = torch.rand(24, 40, generator=g) < 0.2
    layer = SparseLinear(mask, bias=False)
    opt = (torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd"
           else torch.optim.Adam(layer.parameters(), lr=0.1))  # fmt: skip
    x = torch.randn(16, 40, generator=g, dtype=torch.float64).float()
    layer(x).pow(2).sum().backward()
    opt.step()
    weight = layer.dense_weight().detach().clone()
    grad_y = torch.randn(16, 24, generator=g)
    expect = RigL.update_mask(weight, mask, grad_y.T @ x, 0.3)  # the dense-mask path
    before = dict(zip(layer.flat_index.tolist(), layer.values.detach().tolist(), strict=True))
    key = "momentum_buffer" if optimizer == "sgd" else "exp_avg"
    state = dict(zip(layer.flat_index.tolist(), opt.state[layer.values][key].tolist(),
                     strict=True))  # fmt: skip
    k = RigL.update_values(layer, 0.3, grad_y, x, opt, chunk_rows=5)
    assert k == int(0.3 * int(mask.sum()))
    assert torch.equal(layer.pattern.mask(), expect)  # the same masks
    after_state = opt.state[layer.values][key]
    for pos, v, st in zip(layer.flat_index.tolist(), layer.values.detach().tolist(),
                          after_state.tolist(), strict=True):  # fmt: skip
        if pos in before:  # kept (or dropped and regrown at once): value and state carried
            assert v == before[pos] and st == state[pos]
        else:  # grown: zero, no history
            assert v == 0.0 and st == 0.0


def test_a_checkpoint_after_a_pattern_change_loads_back_without_unpickling(tmp_path):
    from safetensors.torch import load_file, save_file

    layer = _layer()
    set_pattern(layer, torch.tensor([1, 2, 9]), torch.tensor([0.5, -1.0, 2.0]))  # nnz 5 -> 3
    save_file(layer.state_dict(), str(tmp_path / "ckpt.safetensors"))
    fresh = SparseLinear(torch.ones(4, 4, dtype=torch.bool), bias=False)  # nnz 16
    fresh.load_state_dict(load_file(str(tmp_path / "ckpt.safetensors")))
    assert fresh.nnz == 3 and torch.equal(fresh.flat_index, torch.tensor([1, 2, 9]))
    x = torch.randn(3, 4)
    torch.testing.assert_close(fresh(x), layer(x))
    bad = dict(layer.state_dict())
    bad["col_idx"] = torch.tensor([1, 2, 7], dtype=bad["col_idx"].dtype)  # outside the shape
    with pytest.raises(ValueError, match="col_idx .* is not the one its flat_index defines"):
        fresh.load_state_dict(bad)


@pytest.mark.parametrize(
    ("key", "edit", "match"),
    [
        ("perm", lambda t: torch.full_like(t, 10**6), "perm .* not the one"),
        ("perm", torch.zeros_like, "perm .* not the one"),
        ("row_ptr", lambda t: torch.tensor([0, 10**6, 2, 2, 3]), "row_ptr .* not the one"),
        ("col_ptr", lambda t: t.flip(0), "col_ptr .* not the one"),
        ("row_of", lambda t: t.long(), "row_of \\(torch.int64"),
        ("flat_index", lambda t: t.flip(0), "flat_index: flat indices must be strictly"),
        ("flat_index", lambda t: t.float(), "flat_index: flat indices must be a 1-D integer"),
        ("values", lambda t: t[:2], "values must be a float vector of the pattern's nnz"),
    ],
)
def test_a_corrupt_checkpoint_is_refused_at_load(key, edit, match):
    # the kernels index without bounds checks: a checkpoint whose buffers disagree with its
    # flat indices would read out of bounds (these edits segfaulted before the check)
    layer = _layer()
    set_pattern(layer, torch.tensor([1, 2, 9]), torch.tensor([0.5, -1.0, 2.0]))
    bad = {k: v.clone() for k, v in layer.state_dict().items()}
    bad[key] = edit(bad[key])
    fresh = SparseLinear(torch.ones(4, 4, dtype=torch.bool), bias=False)
    with pytest.raises(ValueError, match=match):
        fresh.load_state_dict(bad)


def test_topology_inputs_are_checked():
    from sparsebench.kernels.topology import smallest, top_outer_abs

    layer = _layer()
    with pytest.raises(ValueError, match="taken must be strictly increasing"):
        grow_random(torch.tensor([5, 1, 3]), 8, 2)
    with pytest.raises(ValueError, match="k must be an int"):
        grow_random(torch.tensor([1, 3]), 8, 2.0)
    with pytest.raises(ValueError, match="fresh must be strictly increasing"):
        set_pattern(layer, layer.flat_index.clone(), 9.0, fresh=layer.flat_index.flip(0))
    with pytest.raises(ValueError, match="new_flat must be a 1-D integer tensor"):
        set_pattern(layer, [1, 2], 0.0)
    with pytest.raises(ValueError, match="one value per position of new_flat \\(2\\), got 3"):
        set_pattern(layer, torch.tensor([1, 2]), torch.ones(3))
    with pytest.raises(ValueError, match="exclude must be strictly increasing"):
        top_outer_abs(torch.ones(2, 3), torch.ones(2, 4), 2, torch.tensor([5, 1]))
    with pytest.raises(ValueError, match="chunk_rows must be >= 1"):
        top_outer_abs(torch.ones(2, 3), torch.ones(2, 4), 2, torch.tensor([1]), chunk_rows=-1)
    with pytest.raises(ValueError, match="not finite"):
        top_outer_abs(torch.full((2, 3), float("nan")), torch.ones(2, 4), 2, torch.tensor([1]))
    with pytest.raises(ValueError, match="NaN"):
        smallest(torch.tensor([float("nan"), 2.0, 0.0]), 2)


def test_a_pattern_changed_under_inference_mode_still_trains():
    layer = _layer()
    with torch.inference_mode():
        set_pattern(layer, torch.tensor([1, 2, 9]), 0.5)
    layer(torch.ones(2, 4)).sum().backward()
    assert layer.values.grad is not None and layer.values.grad.shape == (3,)


def test_smallest_by_hand_ties_to_the_lower_index():
    from sparsebench.kernels.topology import smallest

    scores = torch.tensor([3.0, 1.0, 2.0, 1.0, 2.0, 0.5])
    assert smallest(scores, 0).tolist() == [False] * 6
    assert smallest(scores, 2).nonzero().squeeze(1).tolist() == [1, 5]  # 0.5, then the first 1
    assert smallest(scores, 4).nonzero().squeeze(1).tolist() == [1, 2, 3, 5]
    assert smallest(scores, 9).all()


@pytest.mark.parametrize("k", [1, 5, 37, 59, 60])
def test_growth_scores_break_ties_by_flat_index_and_cover_every_k(k):
    from sparsebench.kernels.topology import top_outer_abs

    # |G| takes only the values 0, 1, 2, 4 (many ties); 60 of 72 positions free
    grad_y = torch.tensor([[1.0, 0.0, 2.0, -1.0, 0.0, 4.0]]).repeat(2, 1) / 2
    x = torch.tensor([[1.0, -1.0, 1.0, 0.0, 1.0, 1.0, -1.0, 1.0, 1.0, 0.0, 1.0, 1.0]]).repeat(2, 1)
    exclude = torch.arange(0, 72, 6)
    g = (grad_y.T @ x).abs().reshape(-1)
    g[exclude] = -1
    # the reference: sort by score descending, then by flat index ascending
    order = sorted(range(72), key=lambda i: (-float(g[i]), i))
    expect = sorted(i for i in order[:k] if g[i] >= 0)
    for chunk_rows in (1, 4, None):
        assert top_outer_abs(grad_y, x, k, exclude, chunk_rows).tolist() == expect


def test_growth_threshold_too_high_is_lowered():
    from sparsebench.kernels.topology import SAMPLE, top_outer_abs

    # G = I x = x on 400 x 400: large scores (10) exactly where the fixed-seed sample looks and
    # 1 elsewhere, so the sample's threshold (10) admits fewer than k and must be lowered
    n = 400
    sampled = torch.unique(
        torch.randint(n * n, (SAMPLE,), generator=torch.Generator().manual_seed(0))
    )
    target = torch.ones(n * n)
    target[sampled] = 10.0
    k = sampled.numel() + 5000
    got = top_outer_abs(torch.eye(n), target.view(n, n), k, torch.empty(0, dtype=torch.int64), 50)
    others = torch.ones(n * n, dtype=torch.bool)
    others[sampled] = False
    expect = torch.sort(torch.cat([sampled, others.nonzero().squeeze(1)[:5000]])).values
    assert torch.equal(got, expect)  # every 10, then the 1s by lowest flat index


def test_growth_fills_with_zero_scores_by_lowest_index():
    from sparsebench.kernels.topology import top_outer_abs

    # only columns 0 and 1 of a 30 x 50 G are nonzero (60 positive scores); k = 100
    grad_y = torch.ones(1, 30)
    x = torch.zeros(1, 50)
    x[0, :2] = torch.tensor([2.0, -3.0])
    exclude = torch.tensor([0, 2, 3])  # one positive score and two zeros taken
    got = top_outer_abs(grad_y, x, 100, exclude, 7).tolist()
    positive = [r * 50 + c for r in range(30) for c in (0, 1) if r * 50 + c != 0]
    zeros = [p for p in range(1500) if p % 50 >= 2 and p not in (2, 3)][: 100 - 59]
    assert got == sorted(positive + zeros)
