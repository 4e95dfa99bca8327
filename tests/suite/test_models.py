"""Model registry: output shapes, the papers' parameter counts, and clear errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sparsebench.suite.models import MODELS, build_model


def _n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize(
    ("name", "shape", "classes"),
    [
        ("lenet300_100", (1, 28, 28), 10),
        ("lenet300_100", (40,), 10),
        ("lenet300_100", (3, 32, 32), 100),
        ("lenet5", (1, 28, 28), 10),
        ("lenet5", (3, 32, 32), 100),
        ("lenet5", (1, 16, 16), 10),
        ("resnet20", (3, 32, 32), 10),
        ("resnet20", (1, 28, 28), 10),
        ("resnet20", (1, 8, 8), 10),
        ("resnet20", (3, 9, 13), 7),  # odd sizes: shortcut subsampling must match stride-2 convs
    ],
)
def test_output_shape(name: str, shape: tuple[int, ...], classes: int) -> None:
    model = build_model(name, shape, classes)
    out = model(torch.randn(2, *shape))
    assert out.shape == (2, classes)
    out.sum().backward()


def test_paper_parameter_counts() -> None:
    assert _n_params(build_model("lenet300_100", (1, 28, 28), 10)) == 266_610
    assert _n_params(build_model("lenet5", (1, 28, 28), 10)) == 431_080  # Han et al.: 431K
    n = _n_params(build_model("resnet20", (3, 32, 32), 10))
    assert 260_000 <= n <= 280_000  # He et al. 2016, Table 6: 0.27M


def test_resnet20_structure() -> None:
    model = build_model("resnet20", (3, 32, 32), 10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 19  # 1 + 3 stages x 3 blocks x 2; + fc = 20 weighted layers
    assert all(c.kernel_size == (3, 3) for c in convs)  # option A: no 1x1 projection shortcuts
    assert {c.out_channels for c in convs} == {16, 32, 64}


def test_same_seed_same_init() -> None:
    torch.manual_seed(0)
    a = build_model("resnet20", (3, 32, 32), 10)
    torch.manual_seed(0)
    b = build_model("resnet20", (3, 32, 32), 10)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_unknown_model_lists_allowed() -> None:
    with pytest.raises(ValueError, match="allowed: lenet300_100, lenet5, mlp3x4096, resnet20"):
        build_model("vgg19", (3, 32, 32), 10)
    assert set(MODELS) == {"lenet300_100", "lenet5", "mlp3x4096", "resnet20", "vit_tiny"}


@pytest.mark.parametrize(
    ("name", "shape", "why"),
    [
        ("lenet5", (40,), "needs image input"),
        ("resnet20", (40,), "needs image input"),
        ("lenet5", (1, 8, 8), r"H, W >= 16"),
        ("resnet20", (3, 4, 32), r"H, W >= 8"),
        ("lenet300_100", (0, 28), "positive"),
    ],
)
def test_incompatible_input_says_why(name: str, shape: tuple[int, ...], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        build_model(name, shape, 10)


def test_vit_tiny_is_the_merging_trunk_with_a_head_and_refuses_other_inputs():
    model = build_model("vit_tiny", (1, 28, 28), 10)
    assert sum(p.numel() for p in model.parameters()) == 139_018
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    with pytest.raises(ValueError, match="vit_tiny needs"):
        build_model("vit_tiny", (3, 32, 32), 10)


def test_wide_mlp_has_three_4096_wide_hidden_layers() -> None:
    model = build_model("mlp3x4096", (1, 28, 28), 10)
    shapes = [tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert shapes == [(4096, 784), (4096, 4096), (4096, 4096), (10, 4096)]
    # weights and biases, by hand
    expect = 784 * 4096 + 4096 + 2 * (4096 * 4096 + 4096) + 4096 * 10 + 10
    assert sum(p.numel() for p in model.parameters()) == expect == 36_818_954
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 10)
