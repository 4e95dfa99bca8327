"""Magnitude, Wanda and SparseGPT on layers small enough to check by hand, or against an
independent formula (SparseGPT's reconstruction: the constrained least-squares solution
computed with NumPy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sparsebench.methods.lm_pruning.base import LayerStats, Target
from sparsebench.methods.lm_pruning.magnitude import Magnitude
from sparsebench.methods.lm_pruning.sparsegpt import SparseGPT, SparseGPTParams
from sparsebench.methods.lm_pruning.wanda import Wanda
from sparsebench.suite.method import NoParams
from sparsebench.suite.pillars.classification.nm import nm_groups_ok

W = torch.tensor([[1.0, -5.0, 2.0, 0.5], [3.0, -0.1, 4.0, 6.0]])


def _stats(x: torch.Tensor, hessian: bool = True) -> LayerStats:
    x = x.to(torch.float64)
    h = 2.0 / x.shape[0] * x.T @ x if hessian else None
    return LayerStats(x.shape[0], (x * x).sum(0), h)


def test_magnitude_removes_the_smallest_of_the_whole_layer_or_of_each_group():
    out = Magnitude(NoParams()).prune(W, None, Target(0.5))
    assert out.tolist() == [[0, -5, 0, 0], [3, 0, 4, 6]]  # 0.1, 0.5, 1, 2 removed
    nm = Magnitude(NoParams()).prune(W, None, Target(0.5, (2, 4)))
    assert nm.tolist() == [[0, -5, 2, 0], [0, 0, 4, 6]]


def test_wanda_weighs_by_the_input_norm_and_compares_within_each_output_row():
    w = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 3.0, 2.0, 1.0]])
    stats = LayerStats(10, torch.tensor([1.0, 4.0, 9.0, 16.0], dtype=torch.float64))
    # scores |W|·‖X_j‖: row 0 [1, 2, 3, 4], row 1 [4, 6, 6, 4]: the two lowest of each row go
    out = Wanda(NoParams()).prune(w, stats, Target(0.5))
    assert out.tolist() == [[0, 0, 1, 1], [0, 3, 2, 0]]
    # magnitude alone, over the whole layer, would empty row 0 (its four 1s are the lowest)
    assert Magnitude(NoParams()).prune(w, None, Target(0.5))[0].tolist() == [0, 0, 0, 0]
    nm = Wanda(NoParams()).prune(w, stats, Target(0.5, (2, 4)))
    assert nm.tolist() == out.tolist()  # one group per row: the same choice
    with pytest.raises(ValueError, match="wanda needs the calibration"):
        Wanda(NoParams()).prune(w, None, Target(0.5))


def test_sparsegpt_at_zero_sparsity_returns_the_layer():
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(5, 8, generator=g), torch.randn(40, 8, generator=g)
    out = SparseGPT(SparseGPTParams(blocksize=4)).prune(w, _stats(x), Target(0.0))
    assert torch.equal(out, w)


def _constrained_lsq(w: np.ndarray, h: np.ndarray, pruned: np.ndarray) -> np.ndarray:
    """argmin over w' with w'[pruned] = 0 of (w - w')ᵀ H (w - w'), per row: w'_K = w_K +
    H_KK⁻¹ H_KP w_P (the OBS update when one weight is pruned)."""
    out = np.zeros_like(w)
    for r in range(w.shape[0]):
        p = pruned[r]
        k = ~p
        out[r, k] = w[r, k] + np.linalg.solve(h[np.ix_(k, k)], h[np.ix_(k, p)] @ w[r, p])
    return out


@pytest.mark.parametrize("n_pruned", [1, 2])
def test_sparsegpt_obs_update_on_a_4x4_layer_is_the_least_squares_reconstruction(n_pruned):
    # The smallest weights sit in the first columns, so every pruned weight comes before every
    # kept one and the sequential updates are the exact constrained optimum of the damped H.
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, generator=g) @ torch.tensor(
        [[1.0, 0.5, 0.2, 0.0], [0.0, 1.0, 0.4, 0.1], [0.0, 0.0, 1.0, 0.3], [0.0, 0.0, 0.0, 1.0]]
    )  # correlated inputs: the update is not zero
    w = torch.randn(4, 4, generator=g, dtype=torch.float64) + 3.0
    w[:, :n_pruned] = 1e-3 * torch.arange(1, 5, dtype=torch.float64).reshape(4, 1)
    stats = _stats(x)
    out = SparseGPT(SparseGPTParams(percdamp=0.01)).prune(w, stats, Target(n_pruned / 4))
    h = stats.hessian.numpy().copy()
    h += 0.01 * np.mean(np.diag(h)) * np.eye(4)
    pruned = np.zeros((4, 4), dtype=bool)
    pruned[:, :n_pruned] = True
    assert (out.numpy() == 0).tolist() == pruned.tolist()
    np.testing.assert_allclose(out.numpy(), _constrained_lsq(w.numpy(), h, pruned), atol=1e-12)
    # and the kept weights moved: the reconstruction is not plain masking
    assert not torch.allclose(out[:, n_pruned:], w[:, n_pruned:])


def test_sparsegpt_reconstructs_better_than_masking_with_the_same_mask():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(200, 16, generator=g) @ torch.randn(16, 16, generator=g)
    w = torch.randn(6, 16, generator=g)
    out = SparseGPT(SparseGPTParams(blocksize=8)).prune(w, _stats(x), Target(0.5))
    mask = out != 0
    assert int((~mask).sum()) == 48  # exactly half of each 8-column block, over all rows
    err_sgpt = ((x @ (w - out).T) ** 2).sum()
    err_mask = ((x @ (w - w * mask).T) ** 2).sum()
    assert err_sgpt < err_mask


@pytest.mark.parametrize("nm", [(2, 4), (4, 8)])
def test_sparsegpt_nm_has_exactly_n_nonzeros_in_every_group(nm):
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(100, 16, generator=g), torch.randn(5, 16, generator=g)
    out = SparseGPT(SparseGPTParams(blocksize=8)).prune(w, _stats(x), Target(0.5, nm))
    assert nm_groups_ok(out != 0, *nm)


def test_sparsegpt_zeroes_the_weights_of_a_dead_input():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(50, 4, generator=g)
    x[:, 2] = 0.0
    w = torch.randn(3, 4, generator=g)
    out = SparseGPT(SparseGPTParams()).prune(w, _stats(x), Target(0.0))
    assert out[:, 2].tolist() == [0.0, 0.0, 0.0] and torch.equal(out[:, [0, 1, 3]], w[:, [0, 1, 3]])
    with pytest.raises(ValueError, match="sparsegpt needs the calibration"):
        SparseGPT(SparseGPTParams()).prune(w, _stats(x, hessian=False), Target(0.5))


def test_sparsegpt_refuses_parameters_outside_their_range():
    with pytest.raises(ValueError, match="blocksize must be >= 1"):
        SparseGPT.check(SparseGPTParams(blocksize=0), {})
    for bad in (-0.1, 0.0, 1.0):
        with pytest.raises(ValueError, match=r"percdamp must be in \(0, 1\)"):
            SparseGPT.check(SparseGPTParams(percdamp=bad), {})


def test_sparsegpt_chooses_the_unstructured_mask_per_block_of_columns():
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(100, 16, generator=g), torch.randn(6, 16, generator=g)
    w[:, 8:] *= 10.0  # a per-layer choice would prune the first block far more
    out = SparseGPT(SparseGPTParams(blocksize=8)).prune(w, _stats(x), Target(0.5))
    assert [int((out[:, b : b + 8] == 0).sum()) for b in (0, 8)] == [24, 24]


@pytest.mark.parametrize("nm", [(2, 4), (4, 8)])
def test_sparsegpt_nm_does_not_depend_on_the_block_size(nm):
    # the lazy update of the later blocks makes blocks of 8 and of 32 columns the same
    g = torch.Generator().manual_seed(6)
    x = torch.randn(100, 32, generator=g) @ torch.randn(32, 32, generator=g)
    w = torch.randn(5, 32, generator=g, dtype=torch.float64)
    small = SparseGPT(SparseGPTParams(blocksize=8)).prune(w, _stats(x), Target(0.5, nm))
    whole = SparseGPT(SparseGPTParams(blocksize=32)).prune(w, _stats(x), Target(0.5, nm))
    torch.testing.assert_close(small, whole, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("nm", [(2, 4), (1, 4)])
def test_sparsegpt_with_uncorrelated_inputs_and_no_dampening_is_wanda(nm):
    # diagonal H: the saliency w²·H_jj ranks as Wanda's |w|·‖X_j‖ and no kept weight moves
    g = torch.Generator().manual_seed(7)
    w = torch.randn(6, 8, generator=g, dtype=torch.float64)
    sq = torch.rand(8, generator=g, dtype=torch.float64) * 10 + 0.1
    stats = LayerStats(50, sq, torch.diag(2.0 / 50 * sq))
    sgpt = SparseGPT(SparseGPTParams(percdamp=0.0)).prune(w, stats, Target(1 - nm[0] / nm[1], nm))
    assert torch.equal(sgpt, Wanda(NoParams()).prune(w, stats, Target(1 - nm[0] / nm[1], nm)))


def test_sparsegpt_refuses_a_block_size_that_splits_an_nm_group():
    with pytest.raises(ValueError, match=r"blocksize 6 is not a multiple of M = 4 \(pattern 2:4\)"):
        SparseGPT.check(SparseGPTParams(blocksize=6), {"patterns": ["unstructured", "2:4"]})
    SparseGPT.check(SparseGPTParams(blocksize=6), {"patterns": ["unstructured"]})
    w, x = torch.randn(2, 12), torch.randn(20, 12)
    with pytest.raises(ValueError, match="blocksize 6 is not a multiple of M = 8"):
        SparseGPT(SparseGPTParams(blocksize=6)).prune(w, _stats(x), Target(0.5, (4, 8)))
