"""Small CNN classifier: three conv-ReLU stages with max pooling, global average pooling, a linear head."""

import torch
import torch.nn as nn

batch_size = 128
in_channels = 3
height = 128
width = 128
num_classes = 10

MODE = "train"
CPU_SIZES = {"batch_size": 4, "height": 40, "width": 40}
EXTRA_SHAPES = [{"batch_size": 3, "height": 37, "width": 45}]


class Model(nn.Module):
    """conv(32)-relu-pool, conv(64)-relu-pool, conv(128)-relu, global mean, linear; outputs logits."""

    def __init__(self, in_channels: int, num_classes: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, num_classes]
