"""A stack of pre-norm MLP blocks (LayerNorm -> Linear -> GELU -> Linear, plus the residual)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

MODE = "eval"
batch_size, seq_len, dim, hidden, depth = 16, 256, 256, 1024, 2
CPU_SIZES = {"batch_size": 2, "seq_len": 32}


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Model(nn.Module):
    def __init__(self, dim, hidden, depth):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, hidden) for _ in range(depth)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, hidden, depth]
