"""A pre-norm self-attention block: LayerNorm -> fused QKV projection -> softmax attention -> projection,
plus the residual."""

import torch
import torch.nn as nn

MODE = "eval"
batch_size, seq_len, dim, heads = 8, 256, 256, 4
CPU_SIZES = {"batch_size": 2, "seq_len": 32}


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (C // self.heads) ** -0.5
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        return x + self.proj(y)


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, heads]
