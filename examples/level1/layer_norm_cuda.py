"""Level 1 layer_norm on CUDA: nn.LayerNorm over the last dimension, one block per row.

Each block of 256 threads reads its row once to accumulate the sum and the sum of squares (in
double: no cancellation at any row length), reduces them in shared memory, then writes
(x - mean) * rstd * weight + bias in a second read of the row (from L2 at these sizes).
``unbiased=True`` divides the variance by n - 1 (torch.var's default), which LayerNorm does not.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <cuda_runtime.h>

#define THREADS 256

__global__ void layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ g,
                                  const float* __restrict__ b, float* __restrict__ out, int H, double eps,
                                  bool unbiased) {
  __shared__ double s_sum[THREADS];
  __shared__ double s_sq[THREADS];
  const float* row = x + (long long)blockIdx.x * H;
  float* dst = out + (long long)blockIdx.x * H;
  double s = 0.0, q = 0.0;
  for (int i = threadIdx.x; i < H; i += THREADS) {
    const double v = row[i];
    s += v;
    q += v * v;
  }
  s_sum[threadIdx.x] = s;
  s_sq[threadIdx.x] = q;
  __syncthreads();
  for (int stride = THREADS / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      s_sum[threadIdx.x] += s_sum[threadIdx.x + stride];
      s_sq[threadIdx.x] += s_sq[threadIdx.x + stride];
    }
    __syncthreads();
  }
  const double mean = s_sum[0] / H;
  const double var = fmax(0.0, (s_sq[0] - s_sum[0] * mean) / (unbiased ? H - 1 : H));
  const float rstd = (float)rsqrt(var + eps), m = (float)mean;
  for (int i = threadIdx.x; i < H; i += THREADS) dst[i] = (row[i] - m) * rstd * g[i] + b[i];
}

int launch_layer_norm(const float* x, const float* g, const float* b, float* out, long long rows, int H, double eps,
                      bool unbiased, void* stream) {
  if (rows == 0 || H == 0) return 0;
  layer_norm_kernel<<<(unsigned)rows, THREADS, 0, static_cast<cudaStream_t>(stream)>>>(x, g, b, out, H, eps,
                                                                                       unbiased);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

int launch_layer_norm(const float* x, const float* g, const float* b, float* out, long long rows, int H, double eps,
                      bool unbiased, void* stream);

torch::Tensor layer_norm(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps, bool unbiased) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x: float32 CUDA tensor");
  const int64_t H = x.size(-1);
  TORCH_CHECK(weight.numel() == H && bias.numel() == H, "weight and bias: one value per feature");
  const c10::cuda::CUDAGuard guard(x.device());
  x = x.contiguous();
  weight = weight.contiguous();
  bias = bias.contiguous();
  auto out = torch::empty_like(x);
  const int err = launch_layer_norm(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                    out.data_ptr<float>(), H == 0 ? 0 : x.numel() / H, (int)H, eps, unbiased,
                                    c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "launch failed: ", cudaGetErrorString((cudaError_t)err));
  return out;
}
"""

_ext = load_inline(name="kl_l1_layer_norm_cuda", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                   functions=["layer_norm"], extra_cflags=["-O1"], extra_cuda_cflags=["-O3"],
                   no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size, eps=1e-5)

    def forward(self, x):
        return _ext.layer_norm(x, self.norm.weight, self.norm.bias, self.norm.eps, False)
