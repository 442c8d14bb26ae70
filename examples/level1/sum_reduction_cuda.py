"""Level 1 sum_reduction on CUDA: torch.sum(x, dim), the reduced dimension dropped.

The tensor is seen as [outer, len, inner] around the reduced dimension. With inner > 1 (this
problem reduces the middle dimension) one thread per output walks the reduced rows in a double
accumulator, neighbouring threads on neighbouring addresses (coalesced); reducing the last
dimension, one warp takes a row and combines its lanes with shuffles. ``keepdim=True`` keeps the
reduced dimension as size 1, which torch.sum does not do by default.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <cuda_runtime.h>

__global__ void sum_rows_warp_kernel(const float* __restrict__ x, float* __restrict__ out, long long rows,
                                     long long len) {
  const long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* p = x + row * len;
  double acc = 0.0;
  for (long long i = lane; i < len; i += 32) acc += p[i];
  for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_down_sync(0xffffffffu, acc, offset);
  if (lane == 0) out[row] = (float)acc;
}

__global__ void sum_strided_kernel(const float* __restrict__ x, float* __restrict__ out, long long outer,
                                   long long len, long long inner) {
  const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (t >= outer * inner) return;
  const long long o = t / inner, i = t % inner;
  const float* p = x + o * len * inner + i;
  double acc = 0.0;
  for (long long r = 0; r < len; ++r) acc += p[r * inner];
  out[t] = (float)acc;
}

int launch_sum_dim(const float* x, float* out, long long outer, long long len, long long inner, void* stream) {
  const long long total = outer * inner;
  if (total == 0) return 0;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (inner == 1)
    sum_rows_warp_kernel<<<(unsigned)((total * 32 + 255) / 256), 256, 0, s>>>(x, out, total, len);
  else
    sum_strided_kernel<<<(unsigned)((total + 255) / 256), 256, 0, s>>>(x, out, outer, len, inner);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <vector>

int launch_sum_dim(const float* x, float* out, long long outer, long long len, long long inner, void* stream);

torch::Tensor sum_dim(torch::Tensor x, int64_t dim, bool keepdim) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x: float32 CUDA tensor");
  if (dim < 0) dim += x.dim();
  TORCH_CHECK(dim >= 0 && dim < x.dim(), "dim out of range");
  const c10::cuda::CUDAGuard guard(x.device());
  x = x.contiguous();
  int64_t outer = 1, inner = 1;
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < dim) outer *= x.size(d);
    if (d > dim) inner *= x.size(d);
    if (d != dim) shape.push_back(x.size(d));
    else if (keepdim) shape.push_back(1);
  }
  auto out = torch::empty(shape, x.options());
  const int err = launch_sum_dim(x.data_ptr<float>(), out.data_ptr<float>(), outer, x.size(dim), inner,
                                 c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "launch failed: ", cudaGetErrorString((cudaError_t)err));
  return out;
}
"""

_ext = load_inline(name="kl_l1_sum_reduction_cuda", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                   functions=["sum_dim"], extra_cflags=["-O1"], extra_cuda_cflags=["-O3"],
                   no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.sum_dim(x, self.dim, False)
