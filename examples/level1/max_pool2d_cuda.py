"""Level 1 max_pool2d on CUDA: nn.MaxPool2d(k, stride, padding) with one thread per output.

Each thread takes the max of the in-bounds part of its window only: padded positions never win
(they are -inf to MaxPool2d). ``zero_padding=True`` lets the padding take part as zeros, which is
avg-pool thinking and wrong at borders whose values are all negative. A NaN wins, as in MaxPool2d.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <cuda_runtime.h>

__global__ void max_pool2d_kernel(const float* __restrict__ x, float* __restrict__ out, int H, int W, int OH,
                                  int OW, int k, int s, int p, bool zero_padding, long long total) {
  const long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int ow = (int)(idx % OW), oh = (int)((idx / OW) % OH);
  const long long plane = idx / ((long long)OW * OH);
  const float* src = x + plane * H * W;
  const int h0 = oh * s - p, w0 = ow * s - p;
  const int hs = max(h0, 0), he = min(h0 + k, H), ws = max(w0, 0), we = min(w0 + k, W);
  const bool clipped = (he - hs) * (we - ws) < k * k;
  float m = (zero_padding && clipped) ? 0.0f : __int_as_float(0xff800000);
  for (int h = hs; h < he; ++h)
    for (int w = ws; w < we; ++w) {
      const float v = src[(long long)h * W + w];
      if (v > m || v != v) m = v;
    }
  out[idx] = m;
}

int launch_max_pool2d(const float* x, float* out, long long planes, int H, int W, int OH, int OW, int k, int s,
                      int p, bool zero_padding, void* stream) {
  const long long total = planes * OH * OW;
  if (total == 0) return 0;
  max_pool2d_kernel<<<(unsigned)((total + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      x, out, H, W, OH, OW, k, s, p, zero_padding, total);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

int launch_max_pool2d(const float* x, float* out, long long planes, int H, int W, int OH, int OW, int k, int s,
                      int p, bool zero_padding, void* stream);

torch::Tensor max_pool2d(torch::Tensor x, int64_t k, int64_t s, int64_t p, bool zero_padding) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.dim() == 4, "x: 4-d float32 CUDA");
  const c10::cuda::CUDAGuard guard(x.device());
  x = x.contiguous();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
  auto out = torch::empty({N, C, OH, OW}, x.options());
  const int err = launch_max_pool2d(x.data_ptr<float>(), out.data_ptr<float>(), N * C, (int)H, (int)W, (int)OH,
                                    (int)OW, (int)k, (int)s, (int)p, zero_padding,
                                    c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "launch failed: ", cudaGetErrorString((cudaError_t)err));
  return out;
}
"""

_ext = load_inline(name="kl_l1_max_pool2d_cuda", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                   functions=["max_pool2d"], extra_cflags=["-O1"], extra_cuda_cflags=["-O3"],
                   no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return _ext.max_pool2d(x, self.kernel_size, self.stride, self.padding, False)
