"""Conv2d, then tanh, scaling, a per-channel bias add and 2D max pooling (seed problem 1)."""

import torch
import torch.nn as nn

batch_size = 128
in_channels = 8
out_channels = 64
height = 256
width = 256
kernel_size = 3
scaling_factor = 2.0
bias_shape = (out_channels, 1, 1)
pool_kernel_size = 4

# Odd sizes on top of the seed shapes: edges after the conv and the pool.
EXTRA_SHAPES = [{"batch_size": 3, "height": 37, "width": 41}]
MODE = "train"
CPU_SIZES = {
    "batch_size": 8,
    "in_channels": 8,
    "out_channels": 16,
    "height": 64,
    "width": 64,
    "bias_shape": (16, 1, 1),
}


class Model(nn.Module):
    """conv -> tanh -> * scaling_factor -> + bias -> max_pool."""

    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scaling_factor = scaling_factor
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.max_pool = nn.MaxPool2d(pool_kernel_size)

    def forward(self, x):
        x = self.conv(x)
        x = torch.tanh(x)
        x = x * self.scaling_factor
        x = x + self.bias
        x = self.max_pool(x)
        return x


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size]
