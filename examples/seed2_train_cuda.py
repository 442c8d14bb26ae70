"""Seed problem 2 on CUDA, train mode: conv -> BatchNorm2d (batch statistics) -> *scale.

cuDNN does the convolution (policy "mixed"); three custom kernels do the rest:
  1. per-channel partial sum / sum of squares over N*H*W: a grid of (splits x channels) blocks,
     each reducing one contiguous slice of its channel with float4 loads; per-thread and per-block
     sums are in double (a channel holds ~2M values and var = E[x^2] - E[x]^2 cancels in float);
     partials are written, not atomically added, so the result is deterministic;
  2. a per-channel finalize: mean, biased variance (what BatchNorm normalises with), the folded
     affine a = gamma * invstd * scale, b = (beta - mean * gamma * invstd) * scale, and the running
     statistics update BatchNorm would do (unbiased variance);
  3. one fused pass out = y * a[c] + b[c], one (n, c) plane per block row, float4 loads and stores.
In eval mode step 1 is skipped and step 2 reads the running statistics.

Fast-compile split: kernels and C-style launchers in ``cuda_sources`` with CUDA headers only; the
torch binding in ``cpp_sources``.
"""

import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kThreads = 256;

template <int VEC>
__device__ __forceinline__ void load_vec(const float* __restrict__ p, float (&v)[VEC]) {
  if constexpr (VEC == 4) {
    const float4 t = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
  } else {
    v[0] = __ldg(p);
  }
}

template <int VEC>
__device__ __forceinline__ void store_vec(float* __restrict__ p, const float (&v)[VEC]) {
  if constexpr (VEC == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    p[0] = v[0];
  }
}

// Block-wide sum of two doubles; the result is valid in thread 0.
__device__ __forceinline__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kThreads / 32], sb[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_down_sync(0xffffffffu, a, o);
    b += __shfl_down_sync(0xffffffffu, b, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { sa[warp] = a; sb[warp] = b; }
  __syncthreads();
  if (warp == 0) {
    a = lane < kThreads / 32 ? sa[lane] : 0.0;
    b = lane < kThreads / 32 ? sb[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_down_sync(0xffffffffu, a, o);
      b += __shfl_down_sync(0xffffffffu, b, o);
    }
  }
}

// Block (s, c) reduces slice s of channel c. A channel is N planes of HW floats; viewed as N*HWv
// vectors of VEC floats, the slice is a contiguous vector range that may span plane boundaries.
template <int VEC>
__global__ void __launch_bounds__(kThreads) bn_partial_stats_kernel(
    const float* __restrict__ y, double* __restrict__ partial, long long N, long long C, long long HW) {
  const long long c = blockIdx.y, s = blockIdx.x, S = gridDim.x;
  const long long HWv = HW / VEC, total = N * HWv;
  const long long chunk = (total + S - 1) / S;
  long long e = s * chunk;
  const long long end = e + chunk < total ? e + chunk : total;
  double sum = 0.0, sq = 0.0;
  while (e < end) {
    const long long n = e / HWv, p0 = e - n * HWv;
    const long long len = (HWv - p0) < (end - e) ? (HWv - p0) : (end - e);
    const float* base = y + (n * C + c) * HW + p0 * VEC;
    for (long long i = threadIdx.x; i < len; i += kThreads) {
      float v[VEC];
      load_vec<VEC>(base + i * VEC, v);
      float ls = 0.f, lq = 0.f;  // VEC <= 4 terms in float, then into double
#pragma unroll
      for (int t = 0; t < VEC; ++t) { ls += v[t]; lq = fmaf(v[t], v[t], lq); }
      sum += ls;
      sq += lq;
    }
    e += len;
  }
  block_sum2(sum, sq);
  if (threadIdx.x == 0) {
    partial[(c * S + s) * 2] = sum;
    partial[(c * S + s) * 2 + 1] = sq;
  }
}

// One thread per channel: statistics -> folded affine (a, b) -> running-statistics update.
__global__ void bn_finalize_kernel(const double* __restrict__ partial, int S, long long count, int C,
                                   const float* __restrict__ gamma, const float* __restrict__ beta,
                                   float* __restrict__ running_mean, float* __restrict__ running_var,
                                   int use_batch_stats, float momentum, float eps, float scale,
                                   float* __restrict__ ab) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double mean, var;
  if (use_batch_stats) {
    double sum = 0.0, sq = 0.0;
    for (int s = 0; s < S; ++s) {  // fixed order: deterministic
      sum += partial[((long long)c * S + s) * 2];
      sq += partial[((long long)c * S + s) * 2 + 1];
    }
    mean = sum / (double)count;
    var = sq / (double)count - mean * mean;
    var = var > 0.0 ? var : 0.0;
    if (momentum >= 0.f) {
      const double unbiased = count > 1 ? var * (double)count / (double)(count - 1) : var;
      running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
  } else {
    mean = running_mean[c];
    var = running_var[c];
  }
  const double k = (double)gamma[c] / sqrt(var + (double)eps);
  ab[c] = (float)(k * scale);
  ab[C + c] = (float)(((double)beta[c] - mean * k) * scale);
}

// grid.x: (n, c) planes; grid.y: chunks of kThreads*UNROLL vectors within a plane.
template <int VEC>
__global__ void __launch_bounds__(kThreads) bn_apply_kernel(
    const float* __restrict__ y, const float* __restrict__ ab, float* __restrict__ out, int C, long long HW) {
  constexpr int UNROLL = 4;  // independent loads in flight per thread
  const long long plane = blockIdx.x;
  const int c = (int)(plane % C);
  const float a = __ldg(ab + c), b = __ldg(ab + C + c);
  const long long HWv = HW / VEC;
  const float* src = y + plane * HW;
  float* dst = out + plane * HW;
  for (long long i0 = (long long)blockIdx.y * kThreads * UNROLL + threadIdx.x; i0 < HWv;
       i0 += (long long)gridDim.y * kThreads * UNROLL) {
    float v[UNROLL][VEC];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long i = i0 + (long long)u * kThreads;
      if (i < HWv) load_vec<VEC>(src + i * VEC, v[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const long long i = i0 + (long long)u * kThreads;
      if (i < HWv) {
#pragma unroll
        for (int t = 0; t < VEC; ++t) v[u][t] = fmaf(v[u][t], a, b);
        store_vec<VEC>(dst + i * VEC, v[u]);
      }
    }
  }
}

static bool vec4_ok(const void* p, long long HW) {
  return HW % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Slices per channel: enough blocks to fill the GPU (~2048 in all), yet >= 8 vectors per thread.
int bn_stats_splits(long long N, long long C, long long HW) {
  long long s = (2048 + C - 1) / C;
  const long long most = (N * HW) / (4LL * kThreads * 8);
  if (s > most) s = most;
  if (s < 1) s = 1;
  return (int)s;
}

// All launchers return a cudaError_t as int (0 = success).
int launch_bn_stats(const float* y, double* partial, long long N, long long C, long long HW, int S,
                    void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const dim3 grid((unsigned)S, (unsigned)C);
  if (vec4_ok(y, HW)) bn_partial_stats_kernel<4><<<grid, kThreads, 0, stream>>>(y, partial, N, C, HW);
  else bn_partial_stats_kernel<1><<<grid, kThreads, 0, stream>>>(y, partial, N, C, HW);
  return (int)cudaGetLastError();
}

int launch_bn_finalize(const double* partial, int S, long long count, int C, const float* gamma,
                       const float* beta, float* running_mean, float* running_var, int use_batch_stats,
                       float momentum, float eps, float scale, float* ab, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  bn_finalize_kernel<<<(C + 127) / 128, 128, 0, stream>>>(partial, S, count, C, gamma, beta, running_mean,
                                                          running_var, use_batch_stats, momentum, eps,
                                                          scale, ab);
  return (int)cudaGetLastError();
}

int launch_bn_apply(const float* y, const float* ab, float* out, long long N, long long C, long long HW,
                    void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const bool v4 = vec4_ok(y, HW) && vec4_ok(out, HW);
  const long long HWv = v4 ? HW / 4 : HW;
  long long chunks = (HWv + kThreads * 4 - 1) / (kThreads * 4);
  if (chunks > 65535) chunks = 65535;  // grid-stride over the rest
  if (chunks < 1) chunks = 1;
  const dim3 grid((unsigned)(N * C), (unsigned)chunks);
  if (v4) bn_apply_kernel<4><<<grid, kThreads, 0, stream>>>(y, ab, out, (int)C, HW);
  else bn_apply_kernel<1><<<grid, kThreads, 0, stream>>>(y, ab, out, (int)C, HW);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>  // lighter than ATen/cuda/CUDAContext.h (no cuBLAS/cuSPARSE headers)

int bn_stats_splits(long long N, long long C, long long HW);
int launch_bn_stats(const float* y, double* partial, long long N, long long C, long long HW, int S,
                    void* stream_ptr);
int launch_bn_finalize(const double* partial, int S, long long count, int C, const float* gamma,
                       const float* beta, float* running_mean, float* running_var, int use_batch_stats,
                       float momentum, float eps, float scale, float* ab, void* stream_ptr);
int launch_bn_apply(const float* y, const float* ab, float* out, long long N, long long C, long long HW,
                    void* stream_ptr);

static void check_launch(int err, const char* what) {
  TORCH_CHECK(err == 0, what, " launch failed: ", cudaGetErrorString((cudaError_t)err));
}

// use_batch_stats: train-mode BatchNorm. momentum < 0: leave the running statistics alone.
torch::Tensor bn_scale(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, torch::Tensor running_mean,
                       torch::Tensor running_var, bool use_batch_stats, double momentum, double eps,
                       double scale) {
  TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.dim() == 4,
              "y must be a 4-d float32 CUDA tensor");
  const int64_t N = y.size(0), C = y.size(1), HW = y.size(2) * y.size(3);
  for (const auto& t : {gamma, beta, running_mean, running_var})
    TORCH_CHECK(t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() && t.numel() == C,
                "per-channel tensors must be contiguous float32 CUDA tensors with one value per channel");
  TORCH_CHECK(C <= 65535 && N * C < (int64_t(1) << 31), "too many channels or planes for this grid");
  const c10::cuda::CUDAGuard guard(y.device());
  y = y.contiguous();
  void* stream = c10::cuda::getCurrentCUDAStream().stream();
  auto out = torch::empty_like(y);
  auto ab = torch::empty({2 * C}, y.options());
  if (y.numel() == 0) return out;
  int S = 0;
  torch::Tensor partial;
  if (use_batch_stats) {
    TORCH_CHECK(N * HW > 1, "BatchNorm in train mode needs more than one value per channel");
    S = bn_stats_splits(N, C, HW);
    partial = torch::empty({C * S * 2}, y.options().dtype(torch::kFloat64));
    check_launch(launch_bn_stats(y.data_ptr<float>(), partial.data_ptr<double>(), N, C, HW, S, stream),
                 "bn_stats");
  }
  check_launch(launch_bn_finalize(use_batch_stats ? partial.data_ptr<double>() : nullptr, S, N * HW, (int)C,
                                  gamma.data_ptr<float>(), beta.data_ptr<float>(),
                                  running_mean.data_ptr<float>(), running_var.data_ptr<float>(),
                                  use_batch_stats ? 1 : 0, (float)momentum, (float)eps, (float)scale,
                                  ab.data_ptr<float>(), stream),
               "bn_finalize");
  check_launch(launch_bn_apply(y.data_ptr<float>(), ab.data_ptr<float>(), out.data_ptr<float>(), N, C, HW,
                               stream),
               "bn_apply");
  return out;
}
"""

_ext = load_inline(
    name="kl_seed2_train_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["bn_scale"],
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
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        bn = self.bn
        momentum = -1.0  # eval: running statistics are read, not updated
        if bn.training:
            # BatchNorm's bookkeeping; momentum=None means a cumulative average (needs the count).
            bn.num_batches_tracked.add_(1)
            momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
        return _ext.bn_scale(y, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.training,
                             momentum, bn.eps, float(self.scaling_factor))
