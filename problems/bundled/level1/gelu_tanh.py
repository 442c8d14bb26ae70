"""Tanh-approximated GELU written out elementwise: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

import math

import torch
import torch.nn as nn

batch_size = 4096
dim = 8192

MODE = "train"
CPU_SIZES = {"batch_size": 512, "dim": 1024}
EXTRA_SHAPES = [{"batch_size": 7, "dim": 1001}]


class Model(nn.Module):
    """The GELU formula of GPT-2, spelled out with torch ops."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
