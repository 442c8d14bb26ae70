"""Multi-layer perceptron: Linear+ReLU hidden layers, then a linear output layer."""

import torch
import torch.nn as nn

batch_size = 512
input_size = 1024
hidden_sizes = [2048, 2048]
output_size = 512

MODE = "train"
CPU_SIZES = {"batch_size": 128, "input_size": 256, "hidden_sizes": [1024, 512], "output_size": 128}
EXTRA_SHAPES = [{"batch_size": 37}]


class Model(nn.Module):
    """Linear -> ReLU for each hidden size, then Linear to output_size (no final activation)."""

    def __init__(self, input_size: int, hidden_sizes: list, output_size: int):
        super().__init__()
        layers = []
        width = input_size
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_sizes, output_size]
