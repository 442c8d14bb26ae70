"""Linear layer (GEMM + bias), then a sum over the features, scaling and sigmoid: one score per row."""

import torch
import torch.nn as nn

batch_size = 1024
in_features = 2048
out_features = 2048
scaling_factor = 0.05

MODE = "train"
CPU_SIZES = {"batch_size": 256, "in_features": 1024, "out_features": 512, "scaling_factor": 0.08}
EXTRA_SHAPES = [{"batch_size": 41}]


class Model(nn.Module):
    """linear -> sum(dim=1, keepdim) -> * scaling_factor -> sigmoid; output (batch, 1)."""

    def __init__(self, in_features: int, out_features: int, scaling_factor: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = torch.sum(x, dim=1, keepdim=True)
        return torch.sigmoid(x * self.scaling_factor)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
