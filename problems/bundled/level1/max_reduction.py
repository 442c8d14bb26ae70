"""Max reduction over the last dimension of a (batch, dim1, dim2) tensor."""

import torch
import torch.nn as nn

batch_size = 128
dim1 = 1024
dim2 = 1024
reduce_dim = 2

MODE = "train"
CPU_SIZES = {"batch_size": 48, "dim1": 256, "dim2": 256}


class Model(nn.Module):
    """Returns the values of torch.max(x, dim=reduce_dim) (the reduced dimension is dropped)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.max(x, dim=self.dim).values


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [reduce_dim]
