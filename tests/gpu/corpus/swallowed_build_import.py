"""Failure: the build fails (a C++ error), caught at import, PyTorch computes everything. The verdict must lead
with the compiler's error.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

BROKEN_CUDA = r"""
#include <cuda_runtime.h>

__global__ void fast_pool_tanh_kernel(const float* __restrict__ y, float* __restrict__ out, long long n, float scale) {
    long long i = blockIdx.x * (long long)blockDimx + threadIdx.x;
    if (i < n) out[i] = tanhf(y[i]) * scale;
}

int launch_fast_pool_tanh(const float* y, float* out, long long n, float scale, void* stream) {
    fast_pool_tanh_kernel<<<(n + 255) / 256, 256, 0, (cudaStream_t)stream>>>(y, out, n, scale);
    return (int)cudaGetLastError();
}
"""

BROKEN_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

int launch_fast_pool_tanh(const float* y, float* out, long long n, float scale, void* stream);

torch::Tensor fast_pool_tanh(torch::Tensor y, torch::Tensor bias, int64_t k, double scale) {
  auto x = y.contiguous();
  auto out = torch::empty({x.size(0), x.size(1), x.size(2) / k, x.size(3) / k}, x.options());
  launch_fast_pool_tanh(x.data_ptr<float>(), out.data_ptr<float>(), out.numel(), (float)scale,
                        c10::cuda::getCurrentCUDAStream().stream());
  return out;
}
"""

try:
    _fast = load_inline(
        name="kl_corpus_fast_pool_cuda",
        cpp_sources=BROKEN_SOURCE,
        cuda_sources=BROKEN_CUDA,
        functions=["fast_pool_tanh"],
        extra_cflags=["-O1"],
        extra_cuda_cflags=["-O3"],
        no_implicit_headers=True,
    )
except Exception:
    _fast = None


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scaling_factor = scaling_factor
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.pool_kernel_size = pool_kernel_size

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        if _fast is not None:
            return _fast.fast_pool_tanh(y, self.bias, self.pool_kernel_size, float(self.scaling_factor))
        return F.max_pool2d(torch.tanh(y) * self.scaling_factor + self.bias, self.pool_kernel_size)
