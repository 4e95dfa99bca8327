"""SparsityPattern: CSR / CSC structure, flat_index, edge cases (empty rows/cols, nnz = 0)."""

from __future__ import annotations

import pytest
import torch

from sparsebench.kernels import SparsityPattern


def test_csr_and_csc_of_a_hand_checked_mask() -> None:
    mask = torch.tensor(
        [
            [1, 0, 1, 0],
            [0, 0, 0, 0],  # empty row
            [1, 1, 0, 0],
        ],
        dtype=torch.bool,
    )  # column 3 is empty
    p = SparsityPattern.from_mask(mask)
    assert p.shape == (3, 4) and p.nnz == 4
    assert p.row_ptr.tolist() == [0, 2, 2, 4]
    assert p.col_idx.tolist() == [0, 2, 0, 1]
    assert p.row_of.tolist() == [0, 0, 2, 2]
    assert p.flat_index.tolist() == [0, 2, 8, 9]
    # CSC of W: column 0 holds rows 0, 2 (CSR positions 0, 2); column 1 row 2; column 2 row 0.
    assert p.col_ptr.tolist() == [0, 2, 3, 4, 4]
    assert p.row_idx.tolist() == [0, 2, 2, 0]
    assert p.perm.tolist() == [0, 2, 3, 1]
    assert p.row_ptr.dtype == torch.int64 and p.col_ptr.dtype == torch.int64
    assert p.col_idx.dtype == torch.int32 and p.row_idx.dtype == torch.int32
    assert torch.equal(p.mask(), mask)
    assert p.density == pytest.approx(4 / 12)


def test_gather_scatter_and_csc_values_agree_with_dense() -> None:
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(9, 11, generator=g) < 0.3
    w = torch.randn(9, 11, generator=g) * mask
    p = SparsityPattern.from_mask(mask)
    values = p.gather(w)
    assert torch.equal(values, w.reshape(-1)[p.flat_index])
    assert torch.equal(p.scatter(values), w)
    # values[perm] lists W's nonzeros column by column (CSR of Wᵀ).
    wt = w.t().contiguous()
    assert torch.equal(values[p.perm], wt[mask.t()])


def test_all_false_mask_and_empty_shapes() -> None:
    p = SparsityPattern.from_mask(torch.zeros(3, 5, dtype=torch.bool))
    assert p.nnz == 0 and p.row_ptr.tolist() == [0, 0, 0, 0] and p.col_ptr.tolist() == [0] * 6
    assert torch.equal(p.scatter(torch.zeros(0)), torch.zeros(3, 5))
    q = SparsityPattern.from_mask(torch.zeros(0, 4, dtype=torch.bool))
    assert q.shape == (0, 4) and q.nnz == 0 and q.density == 0.0


def test_zero_one_mask_of_any_dtype_and_bad_inputs_raise() -> None:
    p = SparsityPattern.from_mask(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    assert p.flat_index.tolist() == [1, 2]
    with pytest.raises(ValueError, match="other than 0 and 1"):  # weights passed as a mask
        SparsityPattern.from_mask(torch.tensor([[0.0, 2.0], [0.5, 0.0]]))
    with pytest.raises(ValueError, match="2-D"):
        SparsityPattern.from_mask(torch.ones(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.Tensor"):
        SparsityPattern.from_mask([[True]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        p.scatter(torch.zeros(3))
    with pytest.raises(ValueError, match="weight shape"):
        p.gather(torch.zeros(3, 3))


def test_to_device_and_from_tensors_round_trip() -> None:
    p = SparsityPattern.from_mask(torch.eye(4, dtype=torch.bool))
    assert p.to("cpu") is p
    q = SparsityPattern.from_tensors(p.shape, p.tensors())
    assert q.shape == p.shape and all(
        torch.equal(a, b) for a, b in zip(q.tensors().values(), p.tensors().values())
    )


def test_from_tensors_refuses_corrupt_buffers() -> None:
    # The C++ and Triton kernels index without bounds checks: a corrupt state dict must not
    # reach them.
    p = SparsityPattern.from_mask(torch.tensor([[True, False, True], [False, True, False]]))
    bad_col = dict(p.tensors(), col_idx=p.col_idx.clone().fill_(3))
    with pytest.raises(ValueError, match="outside shape"):
        SparsityPattern.from_tensors(p.shape, bad_col)
    short = dict(p.tensors(), perm=p.perm[:-1])
    with pytest.raises(ValueError, match="numbers of nonzeros"):
        SparsityPattern.from_tensors(p.shape, short)
    with pytest.raises(ValueError, match="do not match shape"):
        SparsityPattern.from_tensors((3, 3), p.tensors())
