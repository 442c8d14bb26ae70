"""Level 1 depthwise_conv2d on the CPU target: groups == channels, "same" padding, in C++/OpenMP.

One thread per (sample, channel) plane: the plane starts at the channel's bias and each of the
k*k taps adds its shifted input rows (PyTorch's convolution is a cross-correlation: no flip).
``flip=True`` turns the filter around, the textbook convolution, which is not what nn.Conv2d does.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <algorithm>

torch::Tensor depthwise_conv2d(torch::Tensor x, torch::Tensor w, torch::Tensor b, int64_t pad, bool flip) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.dim() == 4, "x: 4-d float32 CPU");
  TORCH_CHECK(w.dim() == 4 && w.size(0) == x.size(1) && w.size(1) == 1, "weight: [C, 1, K, K]");
  x = x.contiguous();
  w = w.contiguous();
  b = b.contiguous();
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), K = w.size(2), KW = w.size(3);
  const int64_t OH = H + 2 * pad - K + 1, OW = W + 2 * pad - KW + 1;
  auto out = torch::empty({N, C, OH, OW}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  float* op = out.data_ptr<float>();
  #pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < N * C; ++plane) {
    const int64_t c = plane % C;
    const float* src = xp + plane * H * W;
    float* dst = op + plane * OH * OW;
    std::fill(dst, dst + OH * OW, bp[c]);
    for (int64_t kh = 0; kh < K; ++kh) {
      for (int64_t kw = 0; kw < KW; ++kw) {
        const float wv = flip ? wp[(c * K + (K - 1 - kh)) * KW + (KW - 1 - kw)] : wp[(c * K + kh) * KW + kw];
        const int64_t lo = std::max<int64_t>(0, pad - kw), hi = std::min<int64_t>(OW, W + pad - kw);
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t ih = oh + kh - pad;
          if (ih < 0 || ih >= H) continue;
          const float* srow = src + ih * W + kw - pad;
          float* drow = dst + oh * OW;
          for (int64_t ow = lo; ow < hi; ++ow) drow[ow] += wv * srow[ow];
        }
      }
    }
  }
  return out;
}
"""

_ext = load_inline(name="kl_l1_depthwise_conv2d_cpu", cpp_sources=CPP_SOURCE, functions=["depthwise_conv2d"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)
        self.padding = kernel_size // 2

    def forward(self, x):
        return _ext.depthwise_conv2d(x, self.conv.weight, self.conv.bias, self.padding, False)
