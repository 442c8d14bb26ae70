"""Kernel for region r2_linear of attention_block.py (CPU).

A lone vendor call: one GEMM accumulated into the broadcast bias.
Every region kernel of attention_block.py builds the same extension (one source, one build).
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

// x @ weight^T + bias as one GEMM into the broadcast bias (nothing to fuse: a lone vendor call).
torch::Tensor linear(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  auto out = bias.expand({x.numel() / x.size(-1), weight.size(0)}).contiguous();
  out.addmm_(x.reshape({-1, x.size(-1)}), weight.t());
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return out.view(sizes);
}

// softmax(q k^T * scale) v per (batch, head), reading q, k and v straight from the packed
// [B, T, 3C] projection: no split, transpose or copy; one row of scores at a time.
torch::Tensor attention(torch::Tensor qkv, int64_t heads) {
  auto x = qkv.contiguous();
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2) / 3, D = C / heads;
  auto out = torch::empty({B, heads, T, D}, x.options());
  const float* p = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  #pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<float> s(T);
      for (int64_t i = 0; i < T; ++i) {
        const float* q = p + (b * T + i) * 3 * C + h * D;
        float m = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          const float* k = p + (b * T + j) * 3 * C + C + h * D;
          float dot = 0.0f;
          for (int64_t d = 0; d < D; ++d) dot += q[d] * k[d];
          s[j] = dot * scale;
          m = s[j] > m ? s[j] : m;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < T; ++j) {
          s[j] = std::exp(s[j] - m);
          sum += s[j];
        }
        float* dst = o + ((b * heads + h) * T + i) * D;
        for (int64_t d = 0; d < D; ++d) dst[d] = 0.0f;
        for (int64_t j = 0; j < T; ++j) {
          const float* v = p + (b * T + j) * 3 * C + 2 * C + h * D;
          const float w = s[j] / sum;
          for (int64_t d = 0; d < D; ++d) dst[d] += w * v[d];
        }
      }
    }
  }
  return out;
}
"""

_ext = load_inline(
    name="kl_attention_block_regions",
    cpp_sources=CPP_SOURCE,
    functions=['layer_norm', 'linear_add', 'linear', 'attention'],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv_weight = nn.Parameter(torch.empty(768, 256))
        self.qkv_bias = nn.Parameter(torch.empty(768))

    def forward(self, x):
        return _ext.linear(x, self.qkv_weight, self.qkv_bias)
