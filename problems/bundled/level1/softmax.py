"""Softmax over the last dimension of a (batch, dim) tensor."""

import torch
import torch.nn as nn

batch_size = 16384
dim = 4096

MODE = "train"
# Probabilities are ~1/dim (~2.4e-4): the default atol 1e-4 would forgive 40 % errors, so it is
# scaled down to the values; fp32 softmax kernels agree to ~1e-9 here.
ATOL = 1e-6
RTOL = 1e-4
CPU_SIZES = {"batch_size": 1024, "dim": 4096}
EXTRA_SHAPES = [{"batch_size": 7, "dim": 1001}]


class Model(nn.Module):
    """Returns torch.softmax(x, dim=-1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
