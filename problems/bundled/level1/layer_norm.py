"""LayerNorm over the hidden dimension of a (batch, seq_len, hidden_size) tensor, with affine weights."""

import torch
import torch.nn as nn

batch_size = 64
seq_len = 1024
hidden_size = 1024

MODE = "train"
CPU_SIZES = {"batch_size": 48, "seq_len": 128, "hidden_size": 1024}
EXTRA_SHAPES = [{"batch_size": 3, "seq_len": 37}]


class Model(nn.Module):
    """nn.LayerNorm(hidden_size); the affine weights start away from 1/0 so they matter."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size, eps=1e-5)
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.2)
        nn.init.normal_(self.norm.bias, mean=0.0, std=0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size]
