"""The fixed sparsity pattern of a weight W (out, in), prepared once, used by every backend.

A pattern holds W's nonzero positions in two compressed layouts (Saad 2003, "Iterative Methods
for Sparse Linear Systems", Sec. 3.4):

* CSR of W (row_ptr, col_idx): the nonzeros of output row ``o`` are
  ``col_idx[row_ptr[o]:row_ptr[o + 1]]``, in increasing column order. The values of a sparse
  layer are stored in this order ("CSR order"); the forward pass y = x Wᵀ + b walks it.
* CSR of Wᵀ, i.e. CSC of W (col_ptr, row_idx, perm): the nonzeros of input column ``i`` are
  ``row_idx[col_ptr[i]:col_ptr[i + 1]]`` and their values are ``values[perm]``; the input
  gradient grad_x = grad_y W walks it.

``flat_index`` maps CSR order to the flattened dense weight, so
``values = weight.reshape(-1)[pattern.flat_index]`` extracts a layer's values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

_INT32_MAX = 2**31 - 1

# Tensor fields in the order of ``tensors()``; SparseLinear registers them as buffers.
TENSOR_FIELDS = ("row_ptr", "col_idx", "row_of", "col_ptr", "row_idx", "perm", "flat_index")


@dataclass(frozen=True, eq=False)
class SparsityPattern:
    """Nonzero positions of a weight W of shape ``(out_features, in_features)``.

    Attributes:
        shape: ``(out_features, in_features)``.
        row_ptr: int64 ``(out + 1,)``, CSR row pointers of W.
        col_idx: int32 ``(nnz,)`` (int64 when ``in_features`` >= 2**31), CSR column indices.
        row_of: same dtype as ``col_idx``, ``(nnz,)``: the row of each nonzero in CSR order
            (the COO row index; SDDMM and gather-based kernels need it).
        col_ptr: int64 ``(in + 1,)``, CSR row pointers of Wᵀ (CSC column pointers of W).
        row_idx: like ``col_idx``, ``(nnz,)``: CSR column indices of Wᵀ (rows of W).
        perm: int64 ``(nnz,)``: ``values_csc = values_csr[perm]``.
        flat_index: int64 ``(nnz,)``: ``row * in_features + col`` in CSR order.

    Build it with :meth:`from_mask`. The object is immutable; ``cache`` holds tensors that
    backends derive from it (e.g. int64 copies for ``torch.sparse``), built on first use.
    """

    shape: tuple[int, int]
    row_ptr: Tensor
    col_idx: Tensor
    row_of: Tensor
    col_ptr: Tensor
    row_idx: Tensor
    perm: Tensor
    flat_index: Tensor
    cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_mask(cls, mask: Tensor) -> SparsityPattern:
        """Pattern of the True entries of ``mask`` (2-D, shape (out, in); bool, or 0/1 of any
        dtype). Empty rows, empty columns and an all-False mask are allowed.

        Raises:
            TypeError: ``mask`` is not a tensor.
            ValueError: ``mask`` is not 2-D, or holds values other than 0 and 1 (a weight or
                score tensor passed by mistake: build the mask with ``w != 0`` or a threshold).
        """
        if not isinstance(mask, Tensor):
            raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
        if mask.dim() != 2:
            raise ValueError(
                f"mask must be 2-D (out_features, in_features), got {tuple(mask.shape)}"
            )
        mask = mask.detach()
        if mask.dtype != torch.bool:
            if mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
                raise ValueError(
                    f"mask of dtype {mask.dtype} holds values other than 0 and 1; pass a bool "
                    "mask (e.g. weight != 0, or scores >= threshold)"
                )
            mask = mask != 0
        flat = mask.reshape(-1).nonzero().squeeze(1)  # row-major, i.e. CSR order
        return cls.from_flat(tuple(int(s) for s in mask.shape), flat)

    @classmethod
    def from_flat(cls, shape: tuple[int, int], flat: Tensor) -> SparsityPattern:
        """Pattern of the positions ``flat`` (row * in_features + col), strictly increasing:
        O(nnz) work and memory besides the (out + 1) and (in + 1) pointers, no dense mask.

        Raises:
            ValueError: ``flat`` is not a 1-D integer tensor of strictly increasing indices
                inside the shape.
        """
        n_out, n_in = int(shape[0]), int(shape[1])
        if flat.dim() != 1 or flat.dtype.is_floating_point or flat.dtype == torch.bool:
            raise ValueError(f"flat indices must be a 1-D integer tensor, got {flat.dtype} "
                             f"of shape {tuple(flat.shape)}")  # fmt: skip
        flat = flat.to(torch.int64)
        if flat.numel() and (
            int(flat[0]) < 0
            or int(flat[-1]) >= n_out * n_in
            or (flat.numel() > 1 and not bool((flat[1:] > flat[:-1]).all()))
        ):
            raise ValueError(
                f"flat indices must be strictly increasing and inside shape ({n_out}, {n_in})"
            )
        device = flat.device
        rows, cols = flat // max(n_in, 1), flat % max(n_in, 1)
        index_dtype = torch.int32 if max(n_out, n_in) <= _INT32_MAX else torch.int64

        row_ptr = torch.zeros(n_out + 1, dtype=torch.int64, device=device)
        row_ptr[1:] = torch.bincount(rows, minlength=n_out).cumsum(0)
        # Stable sort by column keeps rows increasing within a column: CSC order of W.
        perm = torch.sort(cols, stable=True).indices
        col_ptr = torch.zeros(n_in + 1, dtype=torch.int64, device=device)
        col_ptr[1:] = torch.bincount(cols, minlength=n_in).cumsum(0)
        return cls(
            shape=(n_out, n_in),
            row_ptr=row_ptr,
            col_idx=cols.to(index_dtype).contiguous(),
            row_of=rows.to(index_dtype).contiguous(),
            col_ptr=col_ptr,
            row_idx=rows[perm].to(index_dtype).contiguous(),
            perm=perm.contiguous(),
            flat_index=flat.contiguous(),
        )

    @classmethod
    def from_tensors(cls, shape: tuple[int, int], tensors: dict[str, Tensor]) -> SparsityPattern:
        """Rebuild a pattern from :meth:`tensors` (e.g. module buffers, a loaded state dict);
        no copies. Checks lengths and index bounds (the C++ and Triton kernels index without
        bounds checks, so a corrupt buffer must not reach them).

        Raises:
            ValueError: inconsistent lengths or an index outside the shape.
        """
        n_out, n_in = int(shape[0]), int(shape[1])
        t = {k: tensors[k] for k in TENSOR_FIELDS}
        nnz = t["col_idx"].numel()
        if t["row_ptr"].numel() != n_out + 1 or t["col_ptr"].numel() != n_in + 1:
            raise ValueError(f"pattern buffers do not match shape ({n_out}, {n_in})")
        if any(t[k].numel() != nnz for k in ("row_of", "row_idx", "perm", "flat_index")):
            raise ValueError("pattern buffers have different numbers of nonzeros")
        if nnz and (
            int(t["col_idx"].max()) >= n_in
            or int(t["row_idx"].max()) >= n_out
            or int(t["col_idx"].min()) < 0
            or int(t["row_idx"].min()) < 0
            or int(t["row_ptr"][-1]) != nnz
            or int(t["col_ptr"][-1]) != nnz
        ):
            raise ValueError(f"pattern indices fall outside shape ({n_out}, {n_in}) or nnz {nnz}")
        return cls(shape=(n_out, n_in), **t)

    def tensors(self) -> dict[str, Tensor]:
        """The index tensors by field name (the order of ``TENSOR_FIELDS``)."""
        return {k: getattr(self, k) for k in TENSOR_FIELDS}

    @property
    def out_features(self) -> int:
        return self.shape[0]

    @property
    def in_features(self) -> int:
        return self.shape[1]

    @property
    def nnz(self) -> int:
        """Number of stored weights."""
        return int(self.flat_index.numel())

    @property
    def density(self) -> float:
        """nnz / (out * in); 0.0 for an empty shape."""
        total = self.shape[0] * self.shape[1]
        return self.nnz / total if total else 0.0

    @property
    def device(self) -> torch.device:
        return self.row_ptr.device

    def to(self, device: torch.device | str) -> SparsityPattern:
        """The same pattern with its index tensors on ``device`` (self if already there)."""
        device = torch.device(device)
        if self.device == device:
            return self
        return SparsityPattern.from_tensors(
            self.shape, {k: v.to(device) for k, v in self.tensors().items()}
        )

    def mask(self) -> Tensor:
        """Dense bool mask (out, in) of the pattern."""
        m = torch.zeros(self.shape[0] * self.shape[1], dtype=torch.bool, device=self.device)
        m[self.flat_index] = True
        return m.view(self.shape)

    def gather(self, weight: Tensor) -> Tensor:
        """Values (nnz,) of a dense ``weight`` (out, in) on the pattern, in CSR order.

        Raises:
            ValueError: ``weight`` does not have the pattern's shape.
        """
        if tuple(weight.shape) != self.shape:
            raise ValueError(f"weight shape {tuple(weight.shape)} != pattern shape {self.shape}")
        return weight.reshape(-1).index_select(0, self.flat_index.to(weight.device))

    def scatter(self, values: Tensor) -> Tensor:
        """Dense weight (out, in) with ``values`` (nnz,) on the pattern and zeros elsewhere.

        Raises:
            ValueError: ``values`` is not a vector of length nnz.
        """
        check_values(values, self)
        w = values.new_zeros(self.shape[0] * self.shape[1])
        w.index_copy_(0, self.flat_index, values)  # in place: no second (out · in) buffer
        return w.view(self.shape)

    def __repr__(self) -> str:
        return (
            f"SparsityPattern(shape={self.shape}, nnz={self.nnz}, density={self.density:.4g}, "
            f"device={self.device})"
        )


def check_values(values: Tensor, pattern: SparsityPattern) -> None:
    """Raise ValueError unless ``values`` is a 1-D tensor of length ``pattern.nnz``."""
    if values.dim() != 1 or values.numel() != pattern.nnz:
        raise ValueError(
            f"values must have shape ({pattern.nnz},) (the pattern's nnz), "
            f"got {tuple(values.shape)}"
        )


__all__ = ["SparsityPattern", "TENSOR_FIELDS", "check_values"]
