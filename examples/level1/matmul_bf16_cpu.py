"""Level 1 matmul_bf16 on the CPU target: A @ B for bfloat16 inputs, accumulated in float32.

One thread per output row: a float32 accumulator row takes A[i, k] * B[k, :] for every k (i-k-j
order, contiguous rows of B), and is rounded to bfloat16 once at the end, as the reference does.
``streamed=False`` is the textbook i-j-k order: the same sums, much slower.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <vector>

torch::Tensor matmul_bf16(torch::Tensor A, torch::Tensor B, bool streamed) {
  TORCH_CHECK(A.device().is_cpu() && A.scalar_type() == torch::kBFloat16 && A.dim() == 2, "A: 2-d bf16 CPU");
  TORCH_CHECK(B.device().is_cpu() && B.scalar_type() == torch::kBFloat16 && B.dim() == 2, "B: 2-d bf16 CPU");
  TORCH_CHECK(A.size(1) == B.size(0), "shapes do not match");
  A = A.contiguous();
  B = B.contiguous();
  const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
  auto out = torch::empty({M, N}, A.options());
  const at::BFloat16* ap = A.data_ptr<at::BFloat16>();
  const at::BFloat16* bp = B.data_ptr<at::BFloat16>();
  at::BFloat16* cp = out.data_ptr<at::BFloat16>();
  #pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    std::vector<float> acc(N, 0.0f);
    const at::BFloat16* a = ap + i * K;
    if (streamed) {
      for (int64_t k = 0; k < K; ++k) {
        const float av = static_cast<float>(a[k]);
        const at::BFloat16* brow = bp + k * N;
        for (int64_t j = 0; j < N; ++j) acc[j] += av * static_cast<float>(brow[j]);
      }
    } else {
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k) acc[j] += static_cast<float>(a[k]) * static_cast<float>(bp[k * N + j]);
    }
    for (int64_t j = 0; j < N; ++j) cp[i * N + j] = at::BFloat16(acc[j]);
  }
  return out;
}
"""

_ext = load_inline(name="kl_l1_matmul_bf16_cpu", cpp_sources=CPP_SOURCE, functions=["matmul_bf16"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.matmul_bf16(A, B, True)
