"""Level 1 max_pool2d on the CPU target: nn.MaxPool2d(k, stride, padding) in one C++/OpenMP pass.

One thread per (sample, channel) plane; each output takes the max of the in-bounds part of its
window only: padded positions never win (they are -inf to MaxPool2d). ``zero_padding=True`` lets
the padding take part as zeros, which is avg-pool thinking and wrong at borders whose values are
all negative. A NaN in a window wins, as in MaxPool2d.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <algorithm>
#include <limits>

torch::Tensor max_pool2d(torch::Tensor x, int64_t k, int64_t s, int64_t p, bool zero_padding) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.dim() == 4, "x: 4-d float32 CPU");
  x = x.contiguous();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
  auto out = torch::empty({N, C, OH, OW}, x.options());
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  #pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < N * C; ++plane) {
    const float* src = xp + plane * H * W;
    float* dst = op + plane * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = oh * s - p, hs = std::max<int64_t>(h0, 0), he = std::min<int64_t>(h0 + k, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = ow * s - p, ws = std::max<int64_t>(w0, 0), we = std::min<int64_t>(w0 + k, W);
        const bool clipped = (he - hs) * (we - ws) < k * k;
        float m = (zero_padding && clipped) ? 0.0f : -std::numeric_limits<float>::infinity();
        for (int64_t h = hs; h < he; ++h)
          for (int64_t w = ws; w < we; ++w) {
            const float v = src[h * W + w];
            if (v > m || v != v) m = v;
          }
        dst[oh * OW + ow] = m;
      }
    }
  }
  return out;
}
"""

_ext = load_inline(name="kl_l1_max_pool2d_cpu", cpp_sources=CPP_SOURCE, functions=["max_pool2d"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return _ext.max_pool2d(x, self.kernel_size, self.stride, self.padding, False)
