"""torchvision's ResNet-18 (random weights), inference: the H200 run of `benchmarks/own_model.py`."""

import torch
import torch.nn as nn
from torchvision.models import resnet18

MODE = "eval"
batch_size = 32
CPU_SIZES = {"batch_size": 2}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = resnet18(weights=None)

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(batch_size, 3, 224, 224)]


def get_init_inputs():
    return []
