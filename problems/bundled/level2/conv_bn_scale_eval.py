"""Conv2d, then BatchNorm2d, then scaling (seed problem 2; MODE picks batch or running statistics)."""

import torch
import torch.nn as nn

batch_size = 128
in_channels = 8
out_channels = 64
height = 128
width = 128
kernel_size = 3
scaling_factor = 2.0

# Odd sizes on top of the seed shapes: edges after the conv and the pool.
EXTRA_SHAPES = [{"batch_size": 3, "height": 37, "width": 41}]
MODE = "eval"
CPU_SIZES = {"batch_size": 16, "in_channels": 8, "out_channels": 32, "height": 64, "width": 64}


class Model(nn.Module):
    """conv -> batch norm -> * scaling_factor."""

    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        x = x * self.scaling_factor
        return x


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scaling_factor]
