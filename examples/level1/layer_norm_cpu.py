"""Level 1 layer_norm on the CPU target: nn.LayerNorm over the last dimension in C++/OpenMP.

One thread per row: mean and biased variance in double (one pass, sum and sum of squares), then
(x - mean) * rstd * weight + bias. ``unbiased=True`` divides the variance by n - 1 (torch.var's
default), which LayerNorm does not do.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>

torch::Tensor layer_norm(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps, bool unbiased) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x: float32 CPU tensor");
  const int64_t H = x.size(-1);
  TORCH_CHECK(weight.numel() == H && bias.numel() == H, "weight and bias: one value per feature");
  x = x.contiguous();
  weight = weight.contiguous();
  bias = bias.contiguous();
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* g = weight.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t rows = x.numel() / H;
  #pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * H;
    double s = 0.0, q = 0.0;
    for (int64_t i = 0; i < H; ++i) { s += row[i]; q += (double)row[i] * row[i]; }
    const double mean = s / H;
    const double var = std::max(0.0, (q - s * mean) / (unbiased ? H - 1 : H));
    const float rstd = (float)(1.0 / std::sqrt(var + eps)), m = (float)mean;
    float* dst = op + r * H;
    for (int64_t i = 0; i < H; ++i) dst[i] = (row[i] - m) * rstd * g[i] + b[i];
  }
  return out;
}
"""

_ext = load_inline(name="kl_l1_layer_norm_cpu", cpp_sources=CPP_SOURCE, functions=["layer_norm"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size, eps=1e-5)

    def forward(self, x):
        return _ext.layer_norm(x, self.norm.weight, self.norm.bias, self.norm.eps, False)
