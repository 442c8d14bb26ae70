"""GroupNorm, then Swish (x * sigmoid(x)), then a per-channel multiplier (NCHW)."""

import torch
import torch.nn as nn

batch_size = 32
channels = 256
num_groups = 16
height = 64
width = 64
multiplier_shape = (channels, 1, 1)

MODE = "train"
CPU_SIZES = {
    "batch_size": 8,
    "channels": 64,
    "num_groups": 8,
    "height": 64,
    "width": 64,
    "multiplier_shape": (64, 1, 1),
}
EXTRA_SHAPES = [{"batch_size": 3, "height": 13, "width": 11}]


class Model(nn.Module):
    """group_norm -> swish -> * multiplier; the norm's affine weights start away from 1/0."""

    def __init__(self, channels: int, num_groups: int, multiplier_shape: tuple):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=1e-5)
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.2)
        nn.init.normal_(self.norm.bias, mean=0.0, std=0.2)
        self.multiplier = nn.Parameter(1.0 + 0.5 * torch.randn(multiplier_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        x = x * torch.sigmoid(x)
        return x * self.multiplier


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, num_groups, multiplier_shape]
