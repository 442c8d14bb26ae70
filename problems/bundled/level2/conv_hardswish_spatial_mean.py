"""Conv2d (3x3, padding 1), then HardSwish, then a global average over the spatial dimensions."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
in_channels = 16
out_channels = 64
height = 128
width = 128
kernel_size = 3

MODE = "train"
CPU_SIZES = {"batch_size": 16, "in_channels": 8, "out_channels": 32, "height": 64, "width": 64}
EXTRA_SHAPES = [{"batch_size": 3, "height": 21, "width": 17}]


class Model(nn.Module):
    """conv -> hardswish -> mean over (H, W); output (batch, out_channels)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = F.hardswish(x)
        return torch.mean(x, dim=(2, 3))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
