"""ConvTranspose2d (2x upsampling: kernel 4, stride 2, padding 1), then a per-channel bias add and scaling."""

import torch
import torch.nn as nn

batch_size = 32
in_channels = 32
out_channels = 16
height = 64
width = 64
kernel_size = 4
stride = 2
padding = 1
scaling_factor = 0.5
bias_shape = (out_channels, 1, 1)

MODE = "train"
CPU_SIZES = {
    "batch_size": 16,
    "in_channels": 16,
    "out_channels": 8,
    "height": 32,
    "width": 32,
    "bias_shape": (8, 1, 1),
}
EXTRA_SHAPES = [{"batch_size": 3, "height": 9, "width": 13}]


class Model(nn.Module):
    """conv_transpose -> + bias -> * scaling_factor."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias_shape, scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(
            in_channels, out_channels, kernel_size, stride=stride, padding=padding
        )
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_transpose(x)
        x = x + self.bias
        return x * self.scaling_factor


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, bias_shape, scaling_factor]
