"""Level 1 softmax on the CPU target: torch.softmax(x, dim=-1) in C++/OpenMP.

One thread per row: the row's max (for stability), then exp(x - max) written to the output while
it is summed, then one scaling pass: two reads of x and two of the output. ``fused=False`` is the
textbook three passes that compute every exp twice (once to sum, once to write).
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>
#include <limits>

torch::Tensor softmax_lastdim(torch::Tensor x, bool fused) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x: float32 CPU tensor");
  x = x.contiguous();
  auto out = torch::empty_like(x);
  const int64_t D = x.size(-1), rows = D == 0 ? 0 : x.numel() / D;
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  #pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * D;
    float* dst = op + r * D;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < D; ++i) m = row[i] > m ? row[i] : m;
    double sum = 0.0;
    if (fused) {
      for (int64_t i = 0; i < D; ++i) { dst[i] = std::exp(row[i] - m); sum += dst[i]; }
      const float inv = (float)(1.0 / sum);
      for (int64_t i = 0; i < D; ++i) dst[i] *= inv;
    } else {
      for (int64_t i = 0; i < D; ++i) sum += std::exp(row[i] - m);
      for (int64_t i = 0; i < D; ++i) dst[i] = (float)(std::exp(row[i] - m) / sum);
    }
  }
  return out;
}
"""

_ext = load_inline(name="kl_l1_softmax_cpu", cpp_sources=CPP_SOURCE, functions=["softmax_lastdim"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.softmax_lastdim(x, True)
