"""Linear layer without bias (GEMM), then a bias add and ReLU."""

import torch
import torch.nn as nn

batch_size = 1024
in_features = 4096
out_features = 4096

MODE = "train"
CPU_SIZES = {"batch_size": 256, "in_features": 1024, "out_features": 512}
EXTRA_SHAPES = [{"batch_size": 37}]


class Model(nn.Module):
    """x @ W^T -> + bias -> relu."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = x + self.bias
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
