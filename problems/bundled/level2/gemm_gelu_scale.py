"""Linear layer (GEMM + bias), then exact (erf) GELU, then scaling by a constant."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 512
in_features = 2048
out_features = 8192
scaling_factor = 1.5

MODE = "train"
CPU_SIZES = {"batch_size": 256, "in_features": 512, "out_features": 1024}
EXTRA_SHAPES = [{"batch_size": 19}]


class Model(nn.Module):
    """linear -> gelu (erf form) -> * scaling_factor."""

    def __init__(self, in_features: int, out_features: int, scaling_factor: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = F.gelu(x)
        return x * self.scaling_factor


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
