"""Single-precision matrix multiplication (GEMM): C = A @ B, A of shape (M, K), B of shape (K, N)."""

import torch
import torch.nn as nn

M = 2048
K = 4096
N = 2048

MODE = "train"
# Entries are sums of K products of N(0, 1) values (std 64): two correct fp32 GEMMs differ by up to
# ~5e-4 near zero (measured against fp64 on an H200), so atol is scaled to the output; 3e-3 is
# still 5e-5 of its typical size.
ATOL = 3e-3
RTOL = 1e-4
CPU_SIZES = {"M": 512, "K": 512, "N": 384}
EXTRA_SHAPES = [{"M": 257, "K": 383, "N": 129}]


class Model(nn.Module):
    """Returns A @ B."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
