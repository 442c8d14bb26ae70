"""A ResNet-style network written by hand (the shape of torchvision's BasicBlock: conv-BN-ReLU,
conv-BN, the residual, ReLU; a strided block with a 1x1 downsample), for checking
`benchmarks/own_model.py` on a CPU, where torchvision does not import beside torch 2.13."""

import torch
import torch.nn as nn

MODE = "eval"
batch_size, size = 8, 64
CPU_SIZES = {"batch_size": 2, "size": 32}


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(inplace=True))
        self.layer1 = nn.Sequential(BasicBlock(32, 32, 1), BasicBlock(32, 32, 1))
        self.layer2 = nn.Sequential(BasicBlock(32, 64, 2), BasicBlock(64, 64, 1))
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def get_inputs():
    return [torch.randn(batch_size, 3, size, size)]


def get_init_inputs():
    return []
