"""bfloat16 matrix multiplication C = A @ B, (M, K) @ (K, N), bf16 inputs and output."""

import torch
import torch.nn as nn

M = 4096
K = 4096
N = 4096

MODE = "train"
ATOL = 1e-2
RTOL = 1e-2
CPU_SIZES = {"M": 1024, "K": 1024, "N": 512}
EXTRA_SHAPES = [{"M": 129, "K": 200, "N": 67}]


class Model(nn.Module):
    """Returns A @ B in bfloat16 (accumulate in fp32; the output is rounded to bf16)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(M, K, dtype=torch.bfloat16)
    B = torch.randn(K, N, dtype=torch.bfloat16)
    return [A, B]


def get_init_inputs():
    return []
