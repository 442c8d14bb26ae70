"""SwiGLU gate: silu(x @ W_gate^T) * (x @ W_up^T), two bias-free GEMMs sharing one input."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 1024
in_features = 2048
hidden_features = 4096

MODE = "train"
CPU_SIZES = {"batch_size": 512, "in_features": 256, "hidden_features": 512}
EXTRA_SHAPES = [{"batch_size": 29}]


class Model(nn.Module):
    """gate = linear_gate(x); up = linear_up(x); silu(gate) * up; output (batch, hidden_features)."""

    def __init__(self, in_features: int, hidden_features: int):
        super().__init__()
        self.gate = nn.Linear(in_features, hidden_features, bias=False)
        self.up = nn.Linear(in_features, hidden_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gate(x)) * self.up(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden_features]
