"""A convolutional stem: conv -> batch norm (eval) -> ReLU, then a residual conv block."""

import torch
import torch.nn as nn
import torch.nn.functional as F

MODE = "eval"
batch_size, channels, height, width = 16, 32, 64, 64
CPU_SIZES = {"batch_size": 2, "height": 16, "width": 16}


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(y + self.bn2(self.conv2(y)))


def get_inputs():
    return [torch.randn(batch_size, 3, height, width)]


def get_init_inputs():
    return [channels]
