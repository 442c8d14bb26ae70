"""Seed problem 2 on CUDA, eval mode: conv -> BatchNorm2d (running statistics) -> *scale.

In eval mode BatchNorm and the scale are one per-channel affine map, so they fold into the
convolution exactly (up to rounding):
    a[c] = scale * gamma[c] / sqrt(running_var[c] + eps)
    W'[c] = W[c] * a[c]
    b'[c] = a[c] * (conv_bias[c] - running_mean[c]) + scale * beta[c]
and the whole model is one cuDNN convolution with (W', b'): no pass over the output besides the
convolution's own. The custom kernel computes W' and b' in every forward, from the weights loaded
after construction (never in __init__); it is tiny (C*Cin*K*K + C values, a few microseconds), and
without it the output is wrong, so it does real work under policy "mixed".
This candidate implements eval mode only; forward refuses train mode rather than answer wrongly.

Fast-compile split: kernel and C-style launcher in ``cuda_sources`` with CUDA headers only; the
torch binding in ``cpp_sources``.
"""

import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <cuda_runtime.h>
#include <cstdint>

// One thread per weight element (threads i < C also write the folded bias).
__global__ void fold_bn_scale_kernel(const float* __restrict__ w, const float* __restrict__ conv_bias,
                                     const float* __restrict__ gamma, const float* __restrict__ beta,
                                     const float* __restrict__ running_mean,
                                     const float* __restrict__ running_var, float eps, float scale,
                                     int C, long long per_channel, float* __restrict__ w_out,
                                     float* __restrict__ b_out) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (long long)C * per_channel) {
    const int c = (int)(i / per_channel);
    const float a = scale * gamma[c] / sqrtf(running_var[c] + eps);  // sqrtf/div: IEEE-exact, no fast math
    w_out[i] = w[i] * a;
  }
  if (i < C) {
    const int c = (int)i;
    const float a = scale * gamma[c] / sqrtf(running_var[c] + eps);
    b_out[c] = a * (conv_bias[c] - running_mean[c]) + scale * beta[c];
  }
}

// Returns a cudaError_t as int (0 = success).
int launch_fold_bn_scale(const float* w, const float* conv_bias, const float* gamma, const float* beta,
                         const float* running_mean, const float* running_var, float eps, float scale, int C,
                         long long per_channel, float* w_out, float* b_out, void* stream_ptr) {
  const long long n = (long long)C * per_channel > C ? (long long)C * per_channel : C;
  const int threads = 256;
  const long long blocks = (n + threads - 1) / threads;
  fold_bn_scale_kernel<<<(unsigned)blocks, threads, 0, static_cast<cudaStream_t>(stream_ptr)>>>(
      w, conv_bias, gamma, beta, running_mean, running_var, eps, scale, C, per_channel, w_out, b_out);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>  // lighter than ATen/cuda/CUDAContext.h (no cuBLAS/cuSPARSE headers)

int launch_fold_bn_scale(const float* w, const float* conv_bias, const float* gamma, const float* beta,
                         const float* running_mean, const float* running_var, float eps, float scale, int C,
                         long long per_channel, float* w_out, float* b_out, void* stream_ptr);

// Returns (W', b') of the convolution that equals conv -> eval BatchNorm -> *scale.
std::vector<torch::Tensor> fold_bn_scale(torch::Tensor w, torch::Tensor conv_bias, torch::Tensor gamma,
                                         torch::Tensor beta, torch::Tensor running_mean,
                                         torch::Tensor running_var, double eps, double scale) {
  TORCH_CHECK(w.is_cuda() && w.scalar_type() == torch::kFloat32 && w.dim() >= 2,
              "conv weight must be a float32 CUDA tensor");
  const int64_t C = w.size(0);
  for (const auto& t : {conv_bias, gamma, beta, running_mean, running_var})
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.numel() == C,
                "per-channel tensors must be contiguous float32 CUDA tensors with one value per channel");
  const c10::cuda::CUDAGuard guard(w.device());
  w = w.contiguous();
  auto w_out = torch::empty_like(w);
  auto b_out = torch::empty({C}, w.options());
  const int err = launch_fold_bn_scale(
      w.data_ptr<float>(), conv_bias.data_ptr<float>(), gamma.data_ptr<float>(), beta.data_ptr<float>(),
      running_mean.data_ptr<float>(), running_var.data_ptr<float>(), (float)eps, (float)scale, (int)C,
      w.numel() / C, w_out.data_ptr<float>(), b_out.data_ptr<float>(),
      c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "fold_bn_scale launch failed: ", cudaGetErrorString((cudaError_t)err));
  return {w_out, b_out};
}
"""

_ext = load_inline(
    name="kl_seed2_eval_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["fold_bn_scale"],
    extra_cflags=["-O1"],
    extra_cuda_cflags=["-O3"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super().__init__()
        # Same submodules as the reference, so its state_dict (incl. BN buffers) loads as is.
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        bn = self.bn
        if bn.training:
            raise RuntimeError("this candidate implements eval-mode BatchNorm only (the problem's MODE)")
        # Folded every call (cheap): the weights are loaded after construction and may change.
        w, b = _ext.fold_bn_scale(self.conv.weight, self.conv.bias, bn.weight, bn.bias, bn.running_mean,
                                  bn.running_var, bn.eps, float(self.scaling_factor))
        return F.conv2d(x, w, b, self.conv.stride, self.conv.padding, self.conv.dilation, self.conv.groups)
