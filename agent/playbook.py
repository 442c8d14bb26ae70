"""The playbook distilled from the seed transcripts: the reasoning steps, in order, per target.

A Python constant rather than a data file so that it ships inside any wheel of the package.
"""

from __future__ import annotations

__all__ = ["playbook"]

_STEPS_COMMON = """\
Work in this order, and say each step's result in a sentence or two before calling tools.

1. Restate the computation and every shape. Derive output sizes exactly: a k x k convolution without
   padding maps H to H - k + 1 (256 -> 254 for k = 3); MaxPool2d(k) uses stride k and floors
   (254 -> 63 for k = 4: the last 2 rows and columns are dropped). Sizes come from the tensors at run
   time: the extra-shape trials change them, so never hard-code them.
2. Count the work of every op: FLOPs (a convolution: 2 * N * Cout * Hout * Wout * Cin * k * k) and
   the bytes it must move (inputs, outputs, weights; 4 bytes per fp32 value). Compare each op's
   FLOP/byte with the device's ridge point: below it the op is memory-bound and costs
   bytes / bandwidth, above it FLOPs / peak rate. Eager PyTorch reads and writes the whole
   intermediate tensor once per elementwise op; that traffic is what fusion removes.
3. Look for exact algebraic rewrites before writing code. They must hold for every input and every
   weight value, signs included:
   - a monotone non-decreasing function commutes with max-pooling, max(f(v)) = f(max(v)): pool first,
     then apply tanh / scale / bias / ReLU to k*k times fewer values (a non-increasing one, such as a
     negative scale, turns max into min);
   - eval-mode BatchNorm is a per-channel affine y * a + b: fold it, and the scalars after it, into
     the convolution's weight and bias, computed in forward from the current weights (they are loaded
     after __init__); train-mode BatchNorm needs the batch's statistics first (a per-channel
     reduction over N, H, W), then the same affine;
   - chains of scalar and per-channel constants fold into one multiply-add.
4. Decide what to write. Under the mixed policy, keep the vendor library (cuDNN/oneDNN convolution,
   cuBLAS/MKL matmul, through torch) for the heavy op where it wins, and fuse the memory-bound rest
   into one pass: read the large intermediate once, write the small output once. Your own version
   of the heavy op pays only if it removes an intermediate entirely at vendor speed.
"""

_CUDA = """\
5. Map threads to data: consecutive threads on consecutive addresses (coalescing); one thread per
   output element, with a grid-stride loop for huge sizes; vectorised float4/float2 loads when the
   pointer and the row length allow it (check, and fall back); const __restrict__ and __ldg for
   read-only data; shared-memory tiles only when threads reuse each other's data; reductions with warp
   shuffles and one shared-memory stage, deterministic (write per-block partials, reduce them in a
   fixed order), long sums in double; 32-bit index math when sizes allow (64-bit division is slow).
6. Numerics: use the accurate tanhf / expf / sqrtf (no --use_fast_math: its approximations can miss
   1e-4); NaN must propagate as in PyTorch (max-pooling keeps a NaN).
7. Iterate: compile, check_correctness, benchmark, profile; attack the largest remaining cost first
   (the profile says where the time goes); submit the fastest correct version. A correct modest
   speedup beats a fast wrong kernel.

Keeping compiles fast (a .cu that includes the torch headers takes about a minute to build):
- Kernels and a plain C launcher go in cuda_sources, including only CUDA headers (<cuda_runtime.h>,
  <cstdint>), built with no_implicit_headers=True: nvcc never parses torch (about 1 s of nvcc).
- The torch binding goes in cpp_sources: #include <torch/extension.h>, <c10/cuda/CUDAGuard.h> and
  <c10/cuda/CUDAStream.h>; pass c10::cuda::getCurrentCUDAStream().stream() to the launcher as a
  void*. Do not include <ATen/cuda/CUDAContext.h>: it pulls in the cuBLAS and cuSPARSE headers.
- Make #include <torch/extension.h> the binding's first line of code (comments may precede it,
  other includes follow it): the harness keeps a precompiled torch header, and the compiler can use
  it only there. It is built once per set of extra_cflags, so keep the same flags from one attempt to
  the next; new flags cost one slow build.
- Build the binding with extra_cflags=["-O1"] (kernels with extra_cuda_cflags=["-O3"]): the binding
  is glue (checks, an allocation, one launch), and -O3 only makes g++ spend seconds optimising
  pybind11 templates (-O1: about 8 s instead of 11-13 s on the H200 host).
- The launcher returns cudaGetLastError() as an int; the binding checks it with TORCH_CHECK.
- Builds are cached by extension name, sources and flags: a Python-only edit reuses the build.

Skeleton:
```python
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r\"\"\"
#include <cuda_runtime.h>
__global__ void my_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = x[i];
}
int launch_my_kernel(const float* x, float* y, long long n, void* stream) {
  long long blocks = (n + 255) / 256; if (blocks > 65535LL * 16) blocks = 65535LL * 16;
  my_kernel<<<(unsigned)blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
  return (int)cudaGetLastError();
}
\"\"\"

CPP_SOURCE = r\"\"\"
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
int launch_my_kernel(const float* x, float* y, long long n, void* stream);
torch::Tensor my_op(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be a float32 CUDA tensor");
  const c10::cuda::CUDAGuard guard(x.device());
  x = x.contiguous();
  auto y = torch::empty_like(x);
  int err = launch_my_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                             c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "my_kernel launch failed: ", cudaGetErrorString((cudaError_t)err));
  return y;
}
\"\"\"

_ext = load_inline(name="my_ext", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["my_op"],
                   extra_cflags=["-O1"], extra_cuda_cflags=["-O3"], no_implicit_headers=True)

class ModelNew(nn.Module):
    def __init__(self, ...):  # exactly Model's constructor arguments
        super().__init__()
        ...  # the same submodules and parameters as Model, under the same names
    def forward(self, x):
        return _ext.my_op(x)
```
"""

_CPU = """\
5. This target has no GPU: your kernels are C++ in cpp_sources (no cuda_sources), OpenMP allowed.
   Parallelise the outer loop over independent planes (#pragma omp parallel for), keep the inner loop
   contiguous and branch-light so -O3 vectorises it, hoist per-channel constants out of it, and
   accumulate long sums in double.
6. Numerics: std::tanh / std::exp / std::sqrt in float or double are accurate enough; do not use
   -ffast-math. NaN must propagate as in PyTorch (max-pooling keeps a NaN).
7. Iterate: compile, check_correctness, benchmark, profile; attack the largest remaining cost first;
   submit the fastest correct version. CPU timings on small sizes are noisy: compare medians, and
   prefer removing whole passes over memory to micro-tuning.

Keeping compiles fast: parsing the torch headers is most of a C++ build. Make
#include <torch/extension.h> the first line of code of cpp_sources (comments may precede it, other
includes follow it): the harness keeps a precompiled torch header, usable only there, built once
per set of extra_cflags, so keep the same flags from one attempt to the next. Builds are cached by
extension name, sources and flags, so a Python-only edit reuses the build.

Skeleton:
```python
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r\"\"\"
#include <torch/extension.h>
torch::Tensor my_op(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x must be a float32 CPU tensor");
  x = x.contiguous();
  auto y = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t n = x.numel();
  #pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) yp[i] = xp[i];
  return y;
}
\"\"\"

_ext = load_inline(name="my_ext", cpp_sources=CPP_SOURCE, functions=["my_op"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)

class ModelNew(nn.Module):
    def __init__(self, ...):  # exactly Model's constructor arguments
        super().__init__()
        ...  # the same submodules and parameters as Model, under the same names
    def forward(self, x):
        return _ext.my_op(x)
```
"""


def playbook(target: str) -> str:
    """The playbook for ``cuda`` or ``cpu``."""
    return _STEPS_COMMON + "\n" + (_CUDA if target == "cuda" else _CPU)
