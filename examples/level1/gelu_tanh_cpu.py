"""Level 1 gelu_tanh on the CPU target: GPT-2's tanh GELU in one C++/OpenMP pass.

Eager spells the formula with five torch ops (pow, mul, add, tanh, mul), each a pass over the
tensor; this is one read and one write. ``exact=True`` is the erf GELU (nn.GELU's default), which
differs from the tanh formula by up to ~5e-4: not this problem.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor gelu(torch::Tensor x, bool exact) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x: float32 CPU tensor");
  x = x.contiguous();
  auto out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t n = x.numel();
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  #pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = xp[i];
    op[i] = exact ? 0.5f * v * (1.0f + std::erf(v * 0.7071067811865476f))
                  : 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
  return out;
}
"""

_ext = load_inline(name="kl_l1_gelu_tanh_cpu", cpp_sources=CPP_SOURCE, functions=["gelu"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu(x, False)
