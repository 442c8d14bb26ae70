"""2D average pooling, kernel 3, stride 2, padding 1, zero padding counted in the average (NCHW)."""

import torch
import torch.nn as nn

batch_size = 16
channels = 64
height = 256
width = 256
kernel_size = 3
stride = 2
padding = 1

MODE = "train"
CPU_SIZES = {"batch_size": 8, "channels": 32, "height": 64, "width": 64}
EXTRA_SHAPES = [{"batch_size": 3, "channels": 5, "height": 37, "width": 41}]


class Model(nn.Module):
    """A single nn.AvgPool2d with its defaults (count_include_pad=True, ceil_mode=False)."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]
