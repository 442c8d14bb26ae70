"""Pre-norm GPT-style transformer block: causal multi-head attention and a GELU MLP, each with a residual."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
seq_len = 1024
d_model = 768
num_heads = 12
mlp_ratio = 4

MODE = "train"
CPU_SIZES = {"batch_size": 16, "seq_len": 64, "d_model": 64, "num_heads": 4}
EXTRA_SHAPES = [{"batch_size": 3, "seq_len": 29}]


class Model(nn.Module):
    """x + attn(ln1(x)), then + mlp(ln2(.)); attention is causal and written out with matmul/softmax."""

    def __init__(self, d_model: int, num_heads: int, mlp_ratio: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, mlp_ratio * d_model)
        self.fc2 = nn.Linear(mlp_ratio * d_model, d_model)
        for ln in (self.ln1, self.ln2):
            nn.init.normal_(ln.weight, mean=1.0, std=0.2)
            nn.init.normal_(ln.bias, mean=0.0, std=0.2)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.proj(out.transpose(1, 2).reshape(b, s, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, num_heads, mlp_ratio]
