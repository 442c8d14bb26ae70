"""2D convolution, 3x3 kernel, stride 1, padding 1, with bias (NCHW)."""

import torch
import torch.nn as nn

batch_size = 32
in_channels = 32
out_channels = 64
kernel_size = 3
padding = 1
height = 128
width = 128

MODE = "train"
CPU_SIZES = {"batch_size": 8, "in_channels": 16, "out_channels": 32, "height": 64, "width": 64}
EXTRA_SHAPES = [{"batch_size": 3, "height": 19, "width": 23}]


class Model(nn.Module):
    """A single nn.Conv2d."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, padding: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
