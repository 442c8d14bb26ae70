"""Conv2d (3x3, padding 1), then ReLU, then 2x2 average pooling."""

import torch
import torch.nn as nn

batch_size = 32
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3
pool_kernel_size = 2

MODE = "train"
CPU_SIZES = {"batch_size": 16, "in_channels": 8, "out_channels": 16, "height": 64, "width": 64}
EXTRA_SHAPES = [{"batch_size": 3, "height": 33, "width": 29}]


class Model(nn.Module):
    """conv -> relu -> avg_pool."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, pool_kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.pool = nn.AvgPool2d(pool_kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = torch.relu(x)
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, pool_kernel_size]
