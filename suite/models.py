"""Model registry: the classic architectures of the sparse-training and pruning literature.

``build_model(name, input_shape, num_classes)`` builds a fresh, randomly initialised model (its
init follows the global torch seed). ``input_shape`` is per example, as in
`sparsebench.suite.data.DataSplits.input_shape`: ``(C, H, W)`` for images, ``(L,)`` for 1-D data.
A model that cannot take the input raises ``ValueError`` saying why.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sparsebench.suite.catalog import Catalog

Builder = Callable[[tuple[int, ...], int], nn.Module]  # (input_shape, num_classes) -> model
MODELS: Catalog[Builder] = Catalog("model")


def _check_shape(input_shape: tuple[int, ...], num_classes: int) -> tuple[int, ...]:
    shape = tuple(int(s) for s in input_shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"input_shape must be non-empty positive sizes, got {input_shape!r}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    return shape


class LeNet300100(nn.Module):
    """LeNet-300-100: the fully connected MNIST net of LeCun et al. (1998), "Gradient-based
    learning applied to document recognition", as pruned by Han et al. (2015), "Learning both
    weights and connections for efficient neural networks" and Lee et al. (2019), "SNIP".

    flatten -> Linear(in, 300) -> ReLU -> Linear(300, 100) -> ReLU -> Linear(100, classes).
    Input ``(N, *input_shape)`` of any shape, output logits ``(N, num_classes)``.
    266,610 parameters on 28x28 MNIST.
    """

    def __init__(self, in_features: int, num_classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, 300)
        self.fc2 = nn.Linear(300, 100)
        self.fc3 = nn.Linear(100, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class LeNet5(nn.Module):
    """LeNet-5 in the Caffe variant used by pruning papers (Han et al. 2015, Table 1: 431K
    parameters; Lee et al. 2019, "SNIP"), after LeCun et al. (1998).

    conv(C, 20, 5) -> ReLU -> maxpool 2 -> conv(20, 50, 5) -> ReLU -> maxpool 2 -> flatten ->
    fc(50*h*w, 500) -> ReLU -> fc(500, classes). (Caffe's ``lenet.prototxt`` itself has no ReLU
    after the convolutions; we add one, as most PyTorch reimplementations do.)
    Input ``(N, C, H, W)`` with H, W >= 16; output ``(N, num_classes)``. 431,080 parameters on
    28x28 MNIST (flattened features 50*4*4 = 800).
    """

    def __init__(self, in_channels: int, height: int, width: int, num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        h, w = (((s - 4) // 2 - 4) // 2 for s in (height, width))  # two (valid conv 5, pool 2)
        self.fc1 = nn.Linear(50 * h * w, 500)
        self.fc2 = nn.Linear(500, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class _BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an option-A (parameter-free) shortcut, He et al. 2016 Sec 4.2.

    When the block downsamples, the shortcut subsamples by 2 and zero-pads the new channels, so
    ResNet-20 keeps exactly the parameter count of the paper (0.27M).
    """

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride = stride
        extra = planes - in_planes
        self.pad = (extra // 2, extra - extra // 2)

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride != 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.pad != (0, 0):
            x = F.pad(x, (0, 0, 0, 0, *self.pad))
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    """CIFAR ResNet of He et al. (2016), "Deep residual learning for image recognition", Sec 4.2.

    conv3x3(C, 16) -> BN -> ReLU -> 3 stages of ``n`` basic blocks (16, 32, 64 channels; the
    first block of stages 2 and 3 has stride 2) -> global average pool -> Linear(64, classes).
    Depth is ``6n + 2``; n = 3 is ResNet-20 (0.27M parameters, 269,722 for 10 classes).
    Shortcuts are option A (identity, zero-padded when channels grow). Convs use He (Kaiming)
    normal init, as in the paper; BN starts at weight 1, bias 0.
    Input ``(N, C, H, W)`` with H, W >= 8; output ``(N, num_classes)``.
    """

    def __init__(self, in_channels: int, num_classes: int, blocks_per_stage: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers: list[nn.Module] = []
        in_planes = 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(blocks_per_stage):
                layers.append(_BasicBlock(in_planes, planes, stride if i == 0 else 1))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _image_shape(name: str, shape: tuple[int, ...], min_hw: int) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise ValueError(
            f"{name} needs image input (C, H, W), got input_shape {shape} "
            f"({len(shape)}-D); use a fully connected model such as lenet300_100"
        )
    c, h, w = shape
    if h < min_hw or w < min_hw:
        raise ValueError(f"{name} needs H, W >= {min_hw}, got input_shape {shape}")
    return c, h, w


@MODELS.register("lenet300_100")
def lenet300_100(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    shape = _check_shape(input_shape, num_classes)
    return LeNet300100(math.prod(shape), num_classes)


class WideMLP(nn.Module):
    """flatten -> three Linear(·, width) + ReLU hidden layers -> Linear(width, classes): the
    wide fully connected net on which truly sparse training is measured (``mlp3x4096``,
    36.8M parameters on 28x28 inputs). Ours: SET's MLPs (Mocanu et al. 2018) are this shape at
    1,000-4,000 units; 4096 is wide enough that a dense step costs what a sparse layer saves."""

    def __init__(self, in_features: int, num_classes: int, width: int = 4096) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, width)
        self.fc4 = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(x, 1)
        for layer in (self.fc1, self.fc2, self.fc3):
            x = F.relu(layer(x))
        return self.fc4(x)


@MODELS.register("mlp3x4096")
def mlp3x4096(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return WideMLP(math.prod(_check_shape(input_shape, num_classes)), num_classes)


@MODELS.register("lenet5")
def lenet5(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    # 16 is the smallest side that leaves a 1x1 map after two (5x5 valid conv, 2x2 pool) stages.
    c, h, w = _image_shape("lenet5", _check_shape(input_shape, num_classes), min_hw=16)
    return LeNet5(c, h, w, num_classes)


@MODELS.register("resnet20")
def resnet20(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    # Two stride-2 stages: 8x8 still leaves a 2x2 map for the last stage.
    c, _, _ = _image_shape("resnet20", _check_shape(input_shape, num_classes), min_hw=8)
    return ResNetCifar(c, num_classes, blocks_per_stage=3)


@dataclass(frozen=True)
class ViTConfig:
    """Width D, blocks, heads per block, FFN hidden ÷ D, patch side in pixels (28 % patch == 0)."""

    width: int = 64
    depth: int = 4
    heads: int = 4
    mlp_ratio: int = 2
    patch: int = 7


class Attention(nn.Module):
    """Multi-head self-attention with separate q, k, v, o projections (so that one head's
    parameters are contiguous row/column slices: the unit structured methods select)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        b, n, d = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, self.heads, d // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)))
        return self.o(out.transpose(1, 2).reshape(b, n, d))


class FFN(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block (Dosovitskiy et al. 2021, Eq. 2-3)."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = FFN(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViTTrunk(nn.Module):
    """ViT encoder (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words", Sec. 3.1): linear
    patch embedding, class token, learned positions, pre-norm blocks, final LayerNorm; the
    feature is the class token's output, shape (B, D), for input (B, 1, 28, 28)."""

    def __init__(self, cfg):  # any object with width, depth, heads, mlp_ratio, patch
        super().__init__()
        self.cfg = cfg
        d, p = cfg.width, cfg.patch
        n = (28 // p) ** 2
        self.patch = nn.Linear(p * p, d)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.blocks = nn.ModuleList(
            Block(d, cfg.heads, d * cfg.mlp_ratio) for _ in range(cfg.depth)
        )
        self.norm = nn.LayerNorm(d)
        self.out_dim = d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, p = x.shape[0], self.cfg.patch
        patches = x.reshape(b, 28 // p, p, 28 // p, p).permute(0, 1, 3, 2, 4).reshape(b, -1, p * p)
        h = torch.cat([self.cls.expand(b, -1, -1), self.patch(patches)], dim=1) + self.pos
        for blk in self.blocks:
            h = blk(h)
        return self.norm(h[:, 0])


class ViTClassifier(nn.Module):
    """:class:`ViTTrunk` with a linear head on the class token. Every ``nn.Linear`` (patch
    embedding, q/k/v/o, FFN, head) is prunable. Input ``(N, 1, 28, 28)``, output
    ``(N, num_classes)``."""

    def __init__(self, num_classes: int, cfg: ViTConfig = ViTConfig()):
        super().__init__()
        self.trunk = ViTTrunk(cfg)
        self.head = nn.Linear(cfg.width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x))


@MODELS.register("vit_tiny")
def vit_tiny(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ViT with width 64, 4 blocks of 4 heads, FFN 128 (139,018 parameters for 10 classes)."""
    shape = _check_shape(input_shape, num_classes)
    if shape != (1, 28, 28):
        raise ValueError(f"vit_tiny needs (1, 28, 28) images (MNIST-like), got {shape}")
    return ViTClassifier(num_classes)


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Build a fresh model ``name`` for per-example ``input_shape`` and ``num_classes`` outputs.
    Raises ValueError for an unknown name or a model that cannot take the input."""
    return MODELS.get(name)(tuple(input_shape), num_classes)
