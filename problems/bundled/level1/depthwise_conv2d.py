"""Depthwise 2D convolution (groups = channels), 5x5 kernel, padding 2, with bias."""

import torch
import torch.nn as nn

batch_size = 16
channels = 128
kernel_size = 5
height = 128
width = 128

MODE = "train"
# The largest CPU input under 2 MiB: above it torch's CPU depthwise 5x5 takes another path, 10-50x
# slower and erratic (8x32x64x64: 8-65 ms), which would make any honest kernel look suspicious.
# Eager here: 0.4-0.9 ms, the one bundled problem under a millisecond on the CPU.
CPU_SIZES = {"batch_size": 8, "channels": 16, "height": 64, "width": 64}
EXTRA_SHAPES = [{"batch_size": 3, "height": 21, "width": 17}]


class Model(nn.Module):
    """nn.Conv2d with groups=channels: each channel is convolved with its own kernel."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size]
