"""Kernels for a real model's top regions, written from the region problems' own code.

A region problem's forward is the model's ATen calls, so a kernel can keep its heavy op as the
problem writes it (cuDNN's convolution, with the stride and padding of that layer) and replace what
follows by one fused pass. Two patterns cover a ResNet's time:

- ``conv2d → batch_norm (eval) [→ add] [→ relu]``: the batch norm folded into the convolution's
  weights (in forward, from the parameters as they are), the shift, the residual and the ReLU in one
  pass over the convolution's output;
- ``layer_norm``: one pass per row.

`kernel_for` writes a candidate (``ModelNew``, its ``__init__`` copied from the problem, so its
parameters have the problem's names and shapes) for a region that matches, else returns None. All
kernels of a target build one extension (one source: one build). CUDA for ``cuda``, C++/OpenMP for
``cpu``.
"""

from __future__ import annotations

import ast
import textwrap

from vocabulary.regionplan import Region

__all__ = ["kernel_for"]

CUDA_SOURCE = r"""
#include <cuda_runtime.h>
#include <cstdint>

__global__ void shift_add_relu_kernel(float* y, const float* shift, const float* res, int64_t n, int64_t hw,
                                      int64_t channels, bool relu) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float v = y[i] + shift[(i / hw) % channels];
    if (res) v += res[i];
    y[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, float* out, int64_t cols,
                                  float eps) {
  const float* row = x + blockIdx.x * cols;
  float* dst = out + blockIdx.x * cols;
  __shared__ float sums[2][32];
  float s = 0.0f, s2 = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) { float v = row[c]; s += v; s2 += v * v; }
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_xor_sync(0xffffffff, s, o);
    s2 += __shfl_xor_sync(0xffffffff, s2, o);
  }
  if ((threadIdx.x & 31) == 0) { sums[0][threadIdx.x >> 5] = s; sums[1][threadIdx.x >> 5] = s2; }
  __syncthreads();
  if (threadIdx.x < 32) {
    int warps = (blockDim.x + 31) / 32;
    s = threadIdx.x < warps ? sums[0][threadIdx.x] : 0.0f;
    s2 = threadIdx.x < warps ? sums[1][threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) {
      s += __shfl_xor_sync(0xffffffff, s, o);
      s2 += __shfl_xor_sync(0xffffffff, s2, o);
    }
    if (threadIdx.x == 0) { sums[0][0] = s; sums[1][0] = s2; }
  }
  __syncthreads();
  float mean = sums[0][0] / cols, var = fmaxf(sums[1][0] / cols - mean * mean, 0.0f), rstd = rsqrtf(var + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = (row[c] - mean) * rstd * w[c] + b[c];
}

void shift_add_relu_launch(float* y, const float* shift, const float* res, int64_t n, int64_t hw, int64_t channels,
                           bool relu, cudaStream_t stream) {
  int blocks = (int)((n + 255) / 256 < 65535 * 8 ? (n + 255) / 256 : 65535 * 8);
  shift_add_relu_kernel<<<blocks, 256, 0, stream>>>(y, shift, res, n, hw, channels, relu);
}

void layer_norm_launch(const float* x, const float* w, const float* b, float* out, int64_t rows, int64_t cols,
                       float eps, cudaStream_t stream) {
  layer_norm_kernel<<<(unsigned)rows, 256, 0, stream>>>(x, w, b, out, cols, eps);
}
"""

CUDA_BINDING = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

void shift_add_relu_launch(float*, const float*, const float*, int64_t, int64_t, int64_t, bool, cudaStream_t);
void layer_norm_launch(const float*, const float*, const float*, float*, int64_t, int64_t, float, cudaStream_t);

torch::Tensor shift_add_relu(torch::Tensor y, torch::Tensor shift, c10::optional<torch::Tensor> res, bool relu) {
  y = y.contiguous();
  auto s = shift.contiguous();
  torch::Tensor r;
  if (res.has_value()) r = res->contiguous();
  shift_add_relu_launch(y.data_ptr<float>(), s.data_ptr<float>(), res.has_value() ? r.data_ptr<float>() : nullptr,
                        y.numel(), y.size(2) * y.size(3), y.size(1), relu, at::cuda::getCurrentCUDAStream());
  return y;
}

torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const int64_t cols = xc.size(-1);
  layer_norm_launch(xc.data_ptr<float>(), w.contiguous().data_ptr<float>(), b.contiguous().data_ptr<float>(),
                    out.data_ptr<float>(), xc.numel() / cols, cols, (float)eps, at::cuda::getCurrentCUDAStream());
  return out;
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor shift_add_relu(torch::Tensor y, torch::Tensor shift, c10::optional<torch::Tensor> res, bool relu) {
  y = y.contiguous();
  auto s = shift.contiguous();
  torch::Tensor r;
  if (res.has_value()) r = res->contiguous();
  float* p = y.data_ptr<float>();
  const float* sp = s.data_ptr<float>();
  const float* rp = res.has_value() ? r.data_ptr<float>() : nullptr;
  const int64_t hw = y.size(2) * y.size(3), channels = y.size(1), n = y.numel();
  #pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = p[i] + sp[(i / hw) % channels] + (rp ? rp[i] : 0.0f);
    p[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
  }
  return y;
}

torch::Tensor layer_norm(torch::Tensor x, torch::Tensor w, torch::Tensor b, double eps) {
  auto xc = x.contiguous();
  auto wc = w.contiguous();
  auto bc = b.contiguous();
  auto out = torch::empty_like(xc);
  const int64_t cols = xc.size(-1), rows = xc.numel() / cols;
  const float* xp = xc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  #pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0.0, m2 = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double d = xp[r * cols + c] - mean;
      mean += d / (c + 1);
      m2 += d * (xp[r * cols + c] - mean);
    }
    const float rstd = (float)(1.0 / std::sqrt(m2 / cols + eps)), mu = (float)mean;
    for (int64_t c = 0; c < cols; ++c)
      op[r * cols + c] = (xp[r * cols + c] - mu) * rstd * wc.data_ptr<float>()[c] + bc.data_ptr<float>()[c];
  }
  return out;
}
"""


def _build(target: str) -> str:
    if target == "cuda":
        return ("_ext = load_inline(name='kl_own_model_cuda', cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,\n"
                "                   functions=['shift_add_relu', 'layer_norm'], extra_cuda_cflags=['-O3'],\n"
                "                   no_implicit_headers=True)\n")
    return ("_ext = load_inline(name='kl_own_model_cpu', cpp_sources=CPP_SOURCE, functions=['shift_add_relu', "
            "'layer_norm'],\n                   extra_cflags=['-O3', '-fopenmp'], extra_ldflags=['-fopenmp'], "
            "no_implicit_headers=True)\n")


def _forward_calls(source: str) -> tuple[ast.ClassDef, list[tuple[str, ast.Call]], list[str]]:
    tree = ast.parse(source)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    forward = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    calls = [(s.targets[0].id, s.value) for s in forward.body if isinstance(s, ast.Assign)
             and isinstance(s.targets[0], ast.Name) and isinstance(s.value, ast.Call)]
    return model, calls, [a.arg for a in forward.args.args[1:]]


def _op(call: ast.Call) -> str:
    func = call.func
    return func.value.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) else ""


def kernel_for(region: Region, target: str) -> str | None:
    """A candidate for ``region`` on ``target`` if its operations match a pattern, else None."""
    source = region.source
    model, calls, args = _forward_calls(source)
    ops = [_op(c) for _, c in calls]
    seg = lambda node: ast.get_source_segment(source, node)  # noqa: E731 - the problem's own text
    init = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    body: list[str] = []
    if ops[:2] == ["conv2d", "batch_norm"] and set(ops[2:]) <= {"add", "relu"} and len(ops) <= 4:
        conv, bn = calls[0][1], calls[1][1]
        weight, gamma, beta, mean, var = (seg(a) for a in (conv.args[1], *bn.args[1:5]))
        eps = seg(bn.args[7])
        conv_bias = seg(conv.args[2])
        rest = ", ".join(seg(a) or "" for a in conv.args[3:])
        residual = "None"
        if "add" in ops:
            add = calls[ops.index("add")][1]
            names = [seg(a) for a in add.args[:2]]
            residual = next(n for n in names if n != calls[1][0])
        body = [f"scale = {gamma} * torch.rsqrt({var} + {eps})",
                f"shift = {beta} - {mean} * scale" + (f" + {conv_bias} * scale" if conv_bias != "None" else ""),
                f"y = torch.ops.aten.conv2d.default({seg(conv.args[0])}, {weight} * scale.view(-1, 1, 1, 1), None"
                + (f", {rest})" if rest else ")"),
                f"return _ext.shift_add_relu(y, shift, {residual}, {'relu' in ops})"]
    elif ops == ["layer_norm"]:
        call = calls[0][1]
        body = [f"return _ext.layer_norm({seg(call.args[0])}, {seg(call.args[2])}, {seg(call.args[3])}, "
                f"{seg(call.args[4])})"]
    else:
        return None
    header = source.split("\nclass Model(nn.Module):")[0]
    init_text = textwrap.indent(textwrap.dedent(ast.get_source_segment(source, init) or ""), "    ")
    forward = "\n".join(["    def forward(self, " + ", ".join(args) + "):", *("        " + line for line in body)])
    return (f'"""Kernel for region {region.name} ({" ".join(region.ops)}): written by benchmarks/own_model.py."""\n'
            f"{header}\nfrom torch.utils.cpp_extension import load_inline\n\n"
            f"CUDA_SOURCE = r'''{CUDA_SOURCE}'''\n"
            f"CPP_SOURCE = r'''{CUDA_BINDING if target == 'cuda' else CPP_SOURCE}'''\n"
            f"{_build(target)}\n\nclass ModelNew(nn.Module):\n{init_text}\n\n{forward}\n")
