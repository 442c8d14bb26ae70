"""Level 1 gelu_tanh on CUDA: GPT-2's tanh GELU in one elementwise kernel.

Eager spells the formula with five torch ops (pow, mul, add, tanh, mul), each a pass over the
128 MB tensor; this is one read and one write, four elements per thread through float4 loads
where the tensor's size allows. ``exact=True`` is the erf GELU (nn.GELU's default), which differs
from the tanh formula by up to ~5e-4: not this problem.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu_one(float v, bool exact) {
  return exact ? 0.5f * v * (1.0f + erff(v * 0.7071067811865476f))
               : 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

__global__ void gelu_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ out, long long n4, bool exact) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float4 v = x[i];
  v.x = gelu_one(v.x, exact);
  v.y = gelu_one(v.y, exact);
  v.z = gelu_one(v.z, exact);
  v.w = gelu_one(v.w, exact);
  out[i] = v;
}

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ out, long long start, long long n,
                            bool exact) {
  const long long i = start + blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = gelu_one(x[i], exact);
}

int launch_gelu(const float* x, float* out, long long n, bool exact, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // float4 needs 16-byte alignment: torch's allocations give it for offset-0 contiguous tensors.
  const bool aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(out)) & 15) == 0;
  const long long n4 = aligned ? n / 4 : 0;
  if (n4 > 0)
    gelu_vec4_kernel<<<(unsigned)((n4 + 255) / 256), 256, 0, s>>>(reinterpret_cast<const float4*>(x),
                                                                  reinterpret_cast<float4*>(out), n4, exact);
  const long long rest = n - n4 * 4;
  if (rest > 0) gelu_kernel<<<(unsigned)((rest + 255) / 256), 256, 0, s>>>(x, out, n4 * 4, n, exact);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

int launch_gelu(const float* x, float* out, long long n, bool exact, void* stream);

torch::Tensor gelu(torch::Tensor x, bool exact) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x: float32 CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  x = x.contiguous();
  auto out = torch::empty_like(x);
  const int err = launch_gelu(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), exact,
                              c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "launch failed: ", cudaGetErrorString((cudaError_t)err));
  return out;
}
"""

_ext = load_inline(name="kl_l1_gelu_tanh_cuda", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                   functions=["gelu"], extra_cflags=["-O1"], extra_cuda_cflags=["-O3"],
                   no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu(x, False)
