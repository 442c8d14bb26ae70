"""Argmax over dimension 1 of a (batch, dim1, dim2) tensor; int64 indices, compared exactly."""

import torch
import torch.nn as nn

batch_size = 128
dim1 = 1024
dim2 = 1024
reduce_dim = 1

MODE = "train"
CPU_SIZES = {"batch_size": 32, "dim1": 256, "dim2": 192}
EXTRA_SHAPES = [{"batch_size": 3, "dim1": 37, "dim2": 41}]


class Model(nn.Module):
    """Returns torch.argmax(x, dim=reduce_dim) (int64; on ties, the first index)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
