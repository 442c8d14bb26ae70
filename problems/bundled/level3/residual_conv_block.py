"""ResNet basic block in eval mode: conv-bn-relu, conv-bn, identity shortcut, relu."""

import torch
import torch.nn as nn

batch_size = 32
channels = 64
height = 56
width = 56

MODE = "eval"
CPU_SIZES = {"batch_size": 16, "channels": 16, "height": 32, "width": 32}
EXTRA_SHAPES = [{"batch_size": 3, "height": 15, "width": 13}]


class Model(nn.Module):
    """relu(bn2(conv2(relu(bn1(conv1(x))))) + x) with 3x3 bias-free convolutions.

    BatchNorm uses running statistics (MODE = "eval"); they and the affine weights start away
    from their 0/1 defaults so that every one of them changes the output.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        for bn in (self.bn1, self.bn2):
            nn.init.uniform_(bn.weight, 0.5, 1.5)
            nn.init.uniform_(bn.bias, -0.3, 0.3)
            nn.init.uniform_(bn.running_mean, -0.2, 0.2)
            nn.init.uniform_(bn.running_var, 0.1, 0.4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
