"""Post-norm residual sublayer: LayerNorm(x + Linear(x)) over the hidden dimension."""

import torch
import torch.nn as nn

batch_size = 16
seq_len = 512
hidden_size = 1024

MODE = "train"
CPU_SIZES = {"batch_size": 8, "seq_len": 256, "hidden_size": 256}
EXTRA_SHAPES = [{"batch_size": 3, "seq_len": 37}]


class Model(nn.Module):
    """linear -> + residual -> layer_norm; the norm's affine weights start away from 1/0."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        self.norm = nn.LayerNorm(hidden_size, eps=1e-5)
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.2)
        nn.init.normal_(self.norm.bias, mean=0.0, std=0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size]
