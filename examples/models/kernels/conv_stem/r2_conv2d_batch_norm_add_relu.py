"""Kernel for region r2_conv2d_batch_norm_add_relu of conv_stem.py (CPU).

Eval-mode batch norm folded into the convolution (in forward); the residual add and ReLU in one
pass.
Every region kernel of conv_stem.py builds the same extension (one source, one build).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""#include <torch/extension.h>

// Eval-mode batch norm folded into the convolution's weights and bias (in forward: they may change).
static torch::Tensor folded_conv(torch::Tensor x, torch::Tensor w, torch::Tensor gamma, torch::Tensor beta,
                                 torch::Tensor mean, torch::Tensor var, double eps) {
  auto scale = gamma / torch::sqrt(var + eps);
  auto wf = w * scale.view({-1, 1, 1, 1});
  auto bf = beta - mean * scale;
  return torch::conv2d(x, wf, bf, 1, 1).contiguous();
}

torch::Tensor conv_bn_relu(torch::Tensor x, torch::Tensor w, torch::Tensor gamma, torch::Tensor beta,
                           torch::Tensor mean, torch::Tensor var) {
  auto y = folded_conv(x, w, gamma, beta, mean, var, 1e-5);
  float* p = y.data_ptr<float>();
  const int64_t n = y.numel();
  #pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
  return y;
}

// ReLU(residual + BN(conv(x))) with the add and the ReLU in one pass.
torch::Tensor conv_bn_add_relu(torch::Tensor x, torch::Tensor w, torch::Tensor gamma, torch::Tensor beta,
                               torch::Tensor mean, torch::Tensor var, torch::Tensor residual) {
  auto y = folded_conv(x, w, gamma, beta, mean, var, 1e-5);
  auto rc = residual.contiguous();
  float* p = y.data_ptr<float>();
  const float* r = rc.data_ptr<float>();
  const int64_t n = y.numel();
  #pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = p[i] + r[i];
    p[i] = v > 0.0f ? v : 0.0f;
  }
  return y;
}
"""

_ext = load_inline(
    name="kl_conv_stem_regions",
    cpp_sources=CPP_SOURCE,
    functions=['conv_bn_relu', 'conv_bn_add_relu'],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    no_implicit_headers=True,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv2_weight = nn.Parameter(torch.empty(32, 32, 3, 3))
        self.bn2_weight = nn.Parameter(torch.empty(32))
        self.bn2_bias = nn.Parameter(torch.empty(32))
        self.register_buffer('bn2_running_mean', torch.empty(32))
        self.register_buffer('bn2_running_var', torch.empty(32))

    def forward(self, x):
        return _ext.conv_bn_add_relu(
            x, self.conv2_weight, self.bn2_weight, self.bn2_bias, self.bn2_running_mean, self.bn2_running_var, x)
