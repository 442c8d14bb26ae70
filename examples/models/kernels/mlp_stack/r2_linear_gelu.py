"""Kernel for region r2_linear_gelu of mlp_stack.py (CPU).

The GEMM stays with the vendor library; bias and GELU are fused in one pass over its output.
Every region kernel of mlp_stack.py builds the same extension (one source, one build).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""#include <torch/extension.h>
#include <cmath>

// Layer norm over the last dimension: one pass for mean and variance (Welford), one to normalise.
torch::Tensor layer_norm(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  const int64_t C = xc.size(-1), rows = xc.numel() / C;
  auto out = torch::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  const float* w = wc.data_ptr<float>();
  const float* b = bc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  #pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = xp + r * C;
    double mean = 0.0, m2 = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double d = row[c] - mean;
      mean += d / (c + 1);
      m2 += d * (row[c] - mean);
    }
    const float rstd = static_cast<float>(1.0 / std::sqrt(m2 / C + eps));
    const float mu = static_cast<float>(mean);
    for (int64_t c = 0; c < C; ++c) op[r * C + c] = (row[c] - mu) * rstd * w[c] + b[c];
  }
  return out;
}

// x @ weight^T + bias + residual: the residual and bias summed once, the GEMM accumulated into them.
torch::Tensor linear_add(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, torch::Tensor residual) {
  const int64_t N = weight.size(0);
  auto out = (residual.reshape({-1, N}) + bias).contiguous();
  out.addmm_(x.reshape({-1, x.size(-1)}), weight.t());
  return out.view(residual.sizes());
}

// GELU(x @ weight^T + bias): the GEMM by the vendor library, bias and GELU (erf) fused in one pass.
torch::Tensor linear_gelu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  auto y = torch::matmul(x, weight.t()).contiguous();
  auto bc = bias.contiguous();
  const int64_t N = weight.size(0), rows = y.numel() / N;
  float* yp = y.data_ptr<float>();
  const float* b = bc.data_ptr<float>();
  #pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = 0; n < N; ++n) {
      const float v = yp[r * N + n] + b[n];
      yp[r * N + n] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    }
  }
  return y;
}
"""

_ext = load_inline(
    name="kl_mlp_stack_regions",
    cpp_sources=CPP_SOURCE,
    functions=['layer_norm', 'linear_add', 'linear_gelu'],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1_weight = nn.Parameter(torch.empty(1024, 256))
        self.fc1_bias = nn.Parameter(torch.empty(1024))

    def forward(self, x):
        return _ext.linear_gelu(x, self.fc1_weight, self.fc1_bias)
