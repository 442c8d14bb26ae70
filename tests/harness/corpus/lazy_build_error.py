"""Failure: the build fails on the first forward, not caught. The verdict is the compile error, with the
compiler's errors.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

BROKEN_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

// Pool-first fused epilogue, unrolled for the 4x4 window.
torch::Tensor fast_pool_tanh(torch::Tensor y, torch::Tensor bias, int64_t k, double scale) {
  auto x = y.contiguous();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  auto out = torch::empty({N, C, H / k, W / k}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = output.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) op[i] = std::tanh(xp[i]) * scale;
  return out;
}
"""


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scaling_factor = scaling_factor
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.pool_kernel_size = pool_kernel_size
        self.fast = None

    def forward(self, x):
        if self.fast is None:
            self.fast = load_inline(
                name="kl_corpus_fast_pool",
                cpp_sources=BROKEN_SOURCE,
                functions=["fast_pool_tanh"],
                extra_cflags=["-O3", "-fopenmp"],
                extra_ldflags=["-fopenmp"],
                no_implicit_headers=True,
            )
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        return self.fast.fast_pool_tanh(y, self.bias, self.pool_kernel_size, float(self.scaling_factor))
