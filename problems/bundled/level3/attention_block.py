"""Multi-head self-attention written out: fused QKV projection, softmax(QK^T/sqrt(d)) V, output projection."""

import math

import torch
import torch.nn as nn

batch_size = 16
seq_len = 512
d_model = 768
num_heads = 12

MODE = "train"
CPU_SIZES = {"batch_size": 8, "seq_len": 128, "d_model": 128, "num_heads": 4}
EXTRA_SHAPES = [{"batch_size": 3, "seq_len": 37}]


class Model(nn.Module):
    """Non-causal multi-head self-attention over x of shape (batch, seq_len, d_model)."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        weights = torch.softmax(scores, dim=-1)
        out = torch.matmul(weights, v)
        out = out.transpose(1, 2).reshape(b, s, d)
        return self.proj(out)


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, num_heads]
