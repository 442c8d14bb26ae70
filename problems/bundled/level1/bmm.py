"""Batched matrix multiplication: (batch, m, k) @ (batch, k, n) -> (batch, m, n)."""

import torch
import torch.nn as nn

batch_size = 128
m = 256
k = 512
n = 384

MODE = "train"
# Entries are sums of k products of N(0, 1) values (std ~23): correct fp32 kernels differ by up to
# ~1e-4 near zero (measured against fp64 on an H200), so atol is scaled to the output.
ATOL = 5e-4
RTOL = 1e-4
CPU_SIZES = {"batch_size": 8, "m": 128, "k": 256, "n": 384}
EXTRA_SHAPES = [{"batch_size": 3, "m": 33, "k": 65, "n": 17}]


class Model(nn.Module):
    """Returns torch.bmm(A, B)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    A = torch.randn(batch_size, m, k)
    B = torch.randn(batch_size, k, n)
    return [A, B]


def get_init_inputs():
    return []
