"""semi_structured: the 2:4 mask check (no GPU needed) and its availability."""

from __future__ import annotations

import pytest
import torch

from sparsebench.kernels import SparseLinear, SparsityPattern, check_two_four

GPU_24 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8


def two_four_mask(n_out: int, n_in: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(n_out, n_in // 4, 4, generator=g)
    keep = scores.topk(2, dim=-1).indices
    mask = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, keep, True)
    return mask.reshape(n_out, n_in)


def test_valid_two_four_masks_pass() -> None:
    check_two_four(two_four_mask(8, 16))
    sparser = two_four_mask(8, 16) & (torch.rand(8, 16) < 0.5)  # <= 2 of 4 is fine
    check_two_four(SparsityPattern.from_mask(sparser))
    check_two_four(torch.zeros(4, 8, dtype=torch.bool))


def test_three_of_four_is_rejected_with_location() -> None:
    mask = two_four_mask(8, 16)
    mask[5, 8:12] = torch.tensor([True, True, True, False])
    with pytest.raises(ValueError, match=r"not 2:4.*row 5, columns 8\.\.11 \(3 nonzeros\)"):
        check_two_four(mask)


def test_width_not_divisible_by_four_is_rejected() -> None:
    with pytest.raises(ValueError, match="divisible by 4, got 10"):
        check_two_four(torch.zeros(4, 10, dtype=torch.bool))


def test_layer_checks_the_mask_before_availability() -> None:
    dense = torch.ones(4, 8, dtype=torch.bool)
    with pytest.raises(ValueError, match="not 2:4"):
        SparseLinear(dense, backend="semi_structured")


@pytest.mark.skipif(GPU_24, reason="a GPU with compute capability >= 8.0 is present")
def test_valid_mask_without_gpu_is_unavailable() -> None:
    with pytest.raises(RuntimeError, match="semi_structured.*(CUDA GPU|compute capability)"):
        SparseLinear(two_four_mask(32, 64), backend="semi_structured")


@pytest.mark.skipif(not GPU_24, reason="needs a CUDA GPU with compute capability >= 8.0")
def test_forward_matches_dense_on_gpu() -> None:  # pragma: no cover - no GPU in CI
    mask = two_four_mask(128, 128)
    layer = SparseLinear(mask, backend="semi_structured", device="cuda", dtype=torch.float16)
    x = torch.randn(64, 128, device="cuda", dtype=torch.float16)
    expected = torch.nn.functional.linear(x, layer.dense_weight(), layer.bias)
    torch.testing.assert_close(layer(x), expected, rtol=1e-2, atol=1e-2)
