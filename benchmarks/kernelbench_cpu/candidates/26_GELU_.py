"""KernelBench-style CPU candidate (benchmarks/kernelbench_cpu/make_candidates.py)."""
# problem: 26_GELU_
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
// KernelBench-style flags (extra_cflags=[""]) build without -O: optimise this file here.
#pragma GCC optimize("O3")
#include <torch/extension.h>
#include <algorithm>
#include <cmath>
#include <limits>

namespace {

template <typename F>
torch::Tensor map_unary(const torch::Tensor& x, F f) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat, "float32 tensors only");
  auto in = x.contiguous();
  auto out = torch::empty_like(in);
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, in.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = f(src[i]);
  });
  return out;
}

// Views a contiguous tensor as (outer, size, inner) around dimension `dim`.
void split_dims(const torch::Tensor& x, int64_t dim, int64_t& outer, int64_t& size, int64_t& inner) {
  outer = 1; inner = 1; size = x.size(dim);
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
}

}  // namespace

torch::Tensor relu_forward(torch::Tensor x) {
  return map_unary(x, [](float v) { return v > 0.f ? v : 0.f; });
}
torch::Tensor leaky_relu_forward(torch::Tensor x, double slope) {
  const float s = static_cast<float>(slope);
  return map_unary(x, [s](float v) { return v > 0.f ? v : v * s; });
}
torch::Tensor sigmoid_forward(torch::Tensor x) {
  return map_unary(x, [](float v) { return 1.f / (1.f + std::exp(-v)); });
}
torch::Tensor tanh_forward(torch::Tensor x) {
  return map_unary(x, [](float v) { return std::tanh(v); });
}
torch::Tensor swish_forward(torch::Tensor x) {
  return map_unary(x, [](float v) { return v / (1.f + std::exp(-v)); });
}
torch::Tensor gelu_forward(torch::Tensor x) {
  return map_unary(x, [](float v) { return 0.5f * v * (1.f + std::erf(v * 0.70710678118654752f)); });
}
torch::Tensor gelu_tanh_forward(torch::Tensor x) {
  return map_unary(x, [](float v) {
    const float inner = 0.79788456080286536f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.f + std::tanh(inner));
  });
}
torch::Tensor selu_forward(torch::Tensor x) {
  const float alpha = 1.6732632423543772f, scale = 1.0507009873554805f;
  return map_unary(x, [=](float v) { return scale * (v > 0.f ? v : alpha * std::expm1(v)); });
}
torch::Tensor elu_forward(torch::Tensor x, double alpha) {
  const float a = static_cast<float>(alpha);
  return map_unary(x, [a](float v) { return v > 0.f ? v : a * std::expm1(v); });
}
torch::Tensor hardsigmoid_forward(torch::Tensor x) {
  return map_unary(x, [](float v) { return std::min(1.f, std::max(0.f, v / 6.f + 0.5f)); });
}
torch::Tensor hardtanh_forward(torch::Tensor x, double lo, double hi) {
  const float l = static_cast<float>(lo), h = static_cast<float>(hi);
  return map_unary(x, [l, h](float v) { return std::min(h, std::max(l, v)); });
}
torch::Tensor softplus_forward(torch::Tensor x) {
  return map_unary(x, [](float v) { return v > 20.f ? v : std::log1p(std::exp(v)); });
}
torch::Tensor softsign_forward(torch::Tensor x) {
  return map_unary(x, [](float v) { return v / (1.f + std::fabs(v)); });
}
torch::Tensor scale_forward(torch::Tensor x, double s) {
  const float f = static_cast<float>(s);
  return map_unary(x, [f](float v) { return v * f; });
}

// Softmax (or log-softmax) over the last dimension of a 2-D tensor, one row per task.
torch::Tensor softmax_rows(torch::Tensor x, bool log) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat, "a 2-D float32 tensor");
  auto in = x.contiguous();
  auto out = torch::empty_like(in);
  const int64_t rows = in.size(0), cols = in.size(1);
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = src + r * cols;
      float* orow = dst + r * cols;
      float peak = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < cols; ++c) peak = std::max(peak, row[c]);
      double total = 0.0;
      for (int64_t c = 0; c < cols; ++c) total += std::exp(static_cast<double>(row[c] - peak));
      if (log) {
        const float shift = peak + static_cast<float>(std::log(total));
        for (int64_t c = 0; c < cols; ++c) orow[c] = row[c] - shift;
      } else {
        const float inv = static_cast<float>(1.0 / total);
        for (int64_t c = 0; c < cols; ++c) orow[c] = std::exp(row[c] - peak) * inv;
      }
    }
  });
  return out;
}

// Reduction over dimension `dim`: op 0 sum, 1 mean, 2 max, 3 min.
torch::Tensor reduce_dim(torch::Tensor x, int64_t dim, int64_t op, bool keepdim) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat, "float32 tensors only");
  auto in = x.contiguous();
  if (dim < 0) dim += in.dim();
  int64_t outer, size, inner;
  split_dims(in, dim, outer, size, inner);
  auto shape = in.sizes().vec();
  shape[dim] = 1;
  auto out = torch::empty(shape, in.options());
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, outer, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> acc(inner);
    for (int64_t o = begin; o < end; ++o) {
      const float* base = src + o * size * inner;
      if (op <= 1) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t s = 0; s < size; ++s)
          for (int64_t i = 0; i < inner; ++i) acc[i] += base[s * inner + i];
        const double div = op == 1 ? static_cast<double>(size) : 1.0;
        for (int64_t i = 0; i < inner; ++i) dst[o * inner + i] = static_cast<float>(acc[i] / div);
      } else {
        float* orow = dst + o * inner;
        for (int64_t i = 0; i < inner; ++i) orow[i] = base[i];
        for (int64_t s = 1; s < size; ++s)
          for (int64_t i = 0; i < inner; ++i) {
            const float v = base[s * inner + i];
            orow[i] = op == 2 ? std::max(orow[i], v) : std::min(orow[i], v);
          }
      }
    }
  });
  return keepdim ? out : out.squeeze(dim);
}

torch::Tensor mse_forward(torch::Tensor a, torch::Tensor b) {
  auto x = a.contiguous(), y = b.contiguous();
  TORCH_CHECK(x.sizes() == y.sizes(), "same shapes");
  const float* p = x.data_ptr<float>();
  const float* q = y.data_ptr<float>();
  const int64_t n = x.numel();
  const double total = at::parallel_reduce(0, n, 1 << 14, 0.0, [&](int64_t begin, int64_t end, double acc) {
    for (int64_t i = begin; i < end; ++i) { const double d = p[i] - q[i]; acc += d * d; }
    return acc;
  }, std::plus<double>());
  return torch::full({}, static_cast<float>(total / static_cast<double>(n)), x.options());
}
"""

kb_cpu_ops = load_inline(
    name="kb_cpu_ops",
    cpp_sources=cpp_source,
    functions=[
        'relu_forward',
        'leaky_relu_forward',
        'sigmoid_forward',
        'tanh_forward',
        'swish_forward',
        'gelu_forward',
        'gelu_tanh_forward',
        'selu_forward',
        'elu_forward',
        'hardsigmoid_forward',
        'hardtanh_forward',
        'softplus_forward',
        'softsign_forward',
        'scale_forward',
        'softmax_rows',
        'reduce_dim',
        'mse_forward',
    ],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return kb_cpu_ops.gelu_forward(x)
