"""Style: the build gated on torch.cuda.is_available(), with a CPU path: the compile sandbox (no GPU) builds the
CPU extension, the run builds the CUDA one at import. Honest: passes.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <cuda_runtime.h>
#include <cstdint>

// Loads VEC consecutive floats (VEC = 1, 2, 4; the launcher guarantees alignment).
template <int VEC>
__device__ __forceinline__ void load_vec(const float* __restrict__ p, float (&v)[VEC]) {
  if constexpr (VEC == 4) {
    const float4 t = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
  } else if constexpr (VEC == 2) {
    const float2 t = __ldg(reinterpret_cast<const float2*>(p));
    v[0] = t.x; v[1] = t.y;
  } else {
    v[0] = __ldg(p);
  }
}

// One thread per pooled output; consecutive threads take consecutive output columns, so a warp
// reads contiguous 32*K-float row segments of the conv output (coalesced).
// KS: window size known at compile time (0 = runtime k). sgn = -1 turns max-pool into min-pool.
// IdxT: 32-bit when the output fits, since 64-bit division costs several times more.
template <int KS, int VEC, typename IdxT>
__global__ void pool_tanh_scale_bias_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                                            float* __restrict__ out, IdxT C, IdxT H, IdxT W, IdxT OH, IdxT OW,
                                            int k_rt, float scale, float sgn, IdxT total) {
  const int k = KS > 0 ? KS : k_rt;  // a compile-time constant when KS > 0: loops fully unroll
  const IdxT stride = (IdxT)gridDim.x * blockDim.x;
  for (IdxT idx = (IdxT)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    const IdxT row = idx / OW;               // (n, c, oh)
    const IdxT ow = idx - row * OW;
    const IdxT plane = row / OH;             // (n, c)
    const IdxT oh = row - plane * OH;
    const IdxT c = plane % C;
    const float* win = y + ((long long)plane * H + (long long)oh * k) * W + (long long)ow * k;
    float m = __int_as_float(0xff800000);    // -inf
#pragma unroll
    for (int i = 0; i < k; ++i) {
#pragma unroll
      for (int j = 0; j < k; j += VEC) {
        float v[VEC];
        load_vec<VEC>(win + (long long)i * W + j, v);
#pragma unroll
        for (int t = 0; t < VEC; ++t) {
          const float s = sgn * v[t];
          if (s > m || s != s) m = s;        // NaN sticks, as in MaxPool2d
        }
      }
    }
    out[idx] = tanhf(sgn * m) * scale + __ldg(bias + c);
  }
}

template <int KS, int VEC, typename IdxT>
static int launch_t(const float* y, const float* bias, float* out, long long C, long long H, long long W,
                    long long OH, long long OW, int k, float scale, long long total, cudaStream_t stream) {
  const int threads = 256;
  long long blocks = (total + threads - 1) / threads;
  if (blocks > 1048576LL) blocks = 1048576LL;  // grid-stride loop covers the rest
  const float sgn = scale < 0.f ? -1.f : 1.f;
  pool_tanh_scale_bias_kernel<KS, VEC, IdxT><<<(unsigned)blocks, threads, 0, stream>>>(
      y, bias, out, (IdxT)C, (IdxT)H, (IdxT)W, (IdxT)OH, (IdxT)OW, k, scale, sgn, (IdxT)total);
  return (int)cudaGetLastError();
}

template <int KS, typename IdxT>
static int launch_k(int vec, const float* y, const float* bias, float* out, long long C, long long H,
                    long long W, long long OH, long long OW, int k, float scale, long long total,
                    cudaStream_t stream) {
  if (vec == 4) return launch_t<KS, 4, IdxT>(y, bias, out, C, H, W, OH, OW, k, scale, total, stream);
  if (vec == 2) return launch_t<KS, 2, IdxT>(y, bias, out, C, H, W, OH, OW, k, scale, total, stream);
  return launch_t<KS, 1, IdxT>(y, bias, out, C, H, W, OH, OW, k, scale, total, stream);
}

// Returns a cudaError_t as int (0 = success), so the C++ side needs no CUDA types.
int launch_pool_tanh_scale_bias(const float* y, const float* bias, float* out, long long N, long long C,
                                long long H, long long W, int k, float scale, void* stream_ptr) {
  const long long OH = H / k, OW = W / k;
  const long long total = N * C * OH * OW;
  if (total == 0) return 0;
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  // Widest load that keeps every window start aligned: W and k multiples of VEC, base aligned.
  const uintptr_t addr = reinterpret_cast<uintptr_t>(y);
  const int vec = (W % 4 == 0 && k % 4 == 0 && addr % 16 == 0) ? 4
                : (W % 2 == 0 && k % 2 == 0 && addr % 8 == 0) ? 2 : 1;
  // 32-bit indices while idx + grid stride cannot wrap (total and stride both < 2^31).
  if (total < (1LL << 31)) {
    if (k == 4) return launch_k<4, unsigned>(vec, y, bias, out, C, H, W, OH, OW, k, scale, total, stream);
    return launch_k<0, unsigned>(vec, y, bias, out, C, H, W, OH, OW, k, scale, total, stream);
  }
  return launch_t<0, 1, unsigned long long>(y, bias, out, C, H, W, OH, OW, k, scale, total, stream);
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>  // lighter than ATen/cuda/CUDAContext.h (no cuBLAS/cuSPARSE headers)

int launch_pool_tanh_scale_bias(const float* y, const float* bias, float* out, long long N, long long C,
                                long long H, long long W, int k, float scale, void* stream_ptr);

torch::Tensor pool_tanh_scale_bias(torch::Tensor y, torch::Tensor bias, int64_t k, double scale) {
  TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.dim() == 4,
              "y must be a 4-d float32 CUDA tensor");
  TORCH_CHECK(bias.is_cuda() && bias.scalar_type() == torch::kFloat32 && bias.numel() == y.size(1),
              "bias must be a float32 CUDA tensor with one value per channel");
  TORCH_CHECK(k >= 1, "pool window must be >= 1");
  TORCH_CHECK(k <= y.size(2) && k <= y.size(3), "pool window larger than the input");
  const c10::cuda::CUDAGuard guard(y.device());
  y = y.contiguous();
  auto b = bias.contiguous();
  const int64_t N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3);
  auto out = torch::empty({N, C, H / k, W / k}, y.options());
  const int err = launch_pool_tanh_scale_bias(
      y.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), N, C, H, W, (int)k, (float)scale,
      c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "pool_tanh_scale_bias launch failed: ", cudaGetErrorString((cudaError_t)err));
  return out;
}
"""

CPU_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>
#include <limits>

// y: conv output [N, C, H, W] float32. Window k x k, stride k, no padding, floor (MaxPool2d(k)).
torch::Tensor pool_tanh_scale_bias(torch::Tensor y, torch::Tensor bias, int64_t k, double scale) {
  TORCH_CHECK(y.device().is_cpu() && y.scalar_type() == torch::kFloat32 && y.dim() == 4,
              "y must be a 4-d float32 CPU tensor");
  TORCH_CHECK(bias.scalar_type() == torch::kFloat32 && bias.numel() == y.size(1),
              "bias must be float32 with one value per channel");
  TORCH_CHECK(k >= 1, "pool window must be >= 1");
  y = y.contiguous();
  auto b = bias.contiguous();
  const int64_t N = y.size(0), C = y.size(1), H = y.size(2), W = y.size(3);
  const int64_t OH = H / k, OW = W / k;
  auto out = torch::empty({N, C, OH, OW}, y.options());
  const float* yp = y.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // Max of sgn*v, then multiply back: min-pool for a negative scale with one code path.
  const float sgn = scale < 0 ? -1.0f : 1.0f;
  const float s = static_cast<float>(scale);

  #pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < N * C; ++p) {
    const float* src = yp + p * H * W;
    float* dst = op + p * OH * OW;
    const float bc = bp[p % C];
    for (int64_t oh = 0; oh < OH; ++oh) {
      for (int64_t ow = 0; ow < OW; ++ow) {
        const float* win = src + oh * k * W + ow * k;
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < k; ++i) {
          for (int64_t j = 0; j < k; ++j) {
            const float v = sgn * win[i * W + j];
            if (v > m || v != v) m = v;  // NaN sticks, as in MaxPool2d
          }
        }
        dst[oh * OW + ow] = std::tanh(sgn * m) * s + bc;
      }
    }
  }
  return out;
}
"""

if torch.cuda.is_available():
    _ext = load_inline(
        name="kl_seed1_cuda",
        cpp_sources=CPP_SOURCE,
        cuda_sources=CUDA_SOURCE,
        functions=["pool_tanh_scale_bias"],
        extra_cflags=["-O1"],
        extra_cuda_cflags=["-O3"],  # no --use_fast_math: tanhf must stay accurate for 1e-4
        no_implicit_headers=True,
    )
else:
    _ext = load_inline(
        name="kl_seed1_cpu",
        cpp_sources=CPU_SOURCE,
        functions=["pool_tanh_scale_bias"],
        extra_cflags=["-O3", "-fopenmp"],
        extra_ldflags=["-fopenmp"],
        no_implicit_headers=True,
    )


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scaling_factor = scaling_factor
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.pool_kernel_size = pool_kernel_size

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        return _ext.pool_tanh_scale_bias(y, self.bias, self.pool_kernel_size, float(self.scaling_factor))
