"""A GPT-2 block from transformers (random weights, scaled-dot-product attention), inference."""

import torch
import torch.nn as nn
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

MODE = "eval"
batch_size, seq_len, n_embd, n_head = 16, 1024, 768, 12
CPU_SIZES = {"batch_size": 2, "seq_len": 32}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        config = GPT2Config(n_embd=n_embd, n_head=n_head, n_layer=1, n_positions=2048)
        config._attn_implementation = "sdpa"
        self.block = GPT2Block(config)

    def forward(self, x):
        return self.block(x)[0]


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return []
