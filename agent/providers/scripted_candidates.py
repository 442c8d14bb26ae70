"""Candidate sources for the scripted LLM's scripts, built from ``examples/`` at run time.

The fast candidates are the examples themselves. The wrong and slow ones are those examples with a
different docstring and ``forward``; their extension sources stay byte-identical, so the harness's
build cache serves them without a compile. Each compile error is a small first draft with its own
extension name (a failed build is remembered only within one job's referee, so each job's compile
error costs one real compile: keep them few).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CANDIDATES", "EXAMPLES_DIR", "LEVEL1_DEMOS", "Level1Demo", "candidate_source", "replace_forward"]

#: The repository's examples (the scripts read them at run time; a wheel install must point elsewhere).
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

_DOCSTRING = re.compile(r'\A"""(.*?)"""', re.DOTALL)
_FORWARD = re.compile(r"^    def forward\(self, x\):\n", re.MULTILINE)


def replace_forward(source: str, forward: str, *, docstring: str) -> str:
    """``source`` with its module docstring and its (last-defined) ``forward`` method replaced.

    ``forward`` is the method's full text at class indentation. Raises ValueError on a file of
    another shape (misuse: the examples changed).
    """
    if not _DOCSTRING.match(source):
        raise ValueError("the example has no module docstring to replace")
    matches = list(_FORWARD.finditer(source))
    if not matches:
        raise ValueError("the example has no `def forward(self, x):` to replace")
    body = source[: matches[-1].start()] + forward.rstrip() + "\n"
    return _DOCSTRING.sub(lambda _: f'"""{docstring.strip()}\n"""', body, count=1)


def _read(examples: Path, name: str) -> str:
    return (examples / name).read_text()


# -- seed problem 1: conv -> tanh -> *scale -> +bias -> maxpool --------------------------------------
#: A naive first version of the convolution: one output row of one channel of one sample at a
#: time, in float64 (hundreds of tiny torch calls per forward: slow beyond any timing noise).
_ROWWISE_CONV = """\
        w, b = self.conv.weight.double(), self.conv.bias.double()
        k = w.shape[2]
        planes = []
        for n in range(x.shape[0]):
            xn = x[n : n + 1].double()
            channels = []
            for c in range(w.shape[0]):
                rows = [F.conv2d(xn[:, :, i : i + k], w[c : c + 1], b[c : c + 1]) for i in range(x.shape[2] - k + 1)]
                channels.append(torch.cat(rows, dim=2))
            planes.append(torch.cat(channels, dim=1))
        y = torch.cat(planes, dim=0).float()
"""

_SEED1_SLOW_CPU = ('''\
    def forward(self, x):
        # First version, correctness before speed: the convolution one output row at a time, in
        # float64, then back to float32; the fused C++ pass does the rest.
''' + _ROWWISE_CONV + '''\
        return _ext.pool_tanh_scale_bias(y, self.bias, self.pool_kernel_size, float(self.scaling_factor))
''')

_SEED1_SLOW_CUDA = '''\
    def forward(self, x):
        # First version, correctness before speed: the convolution in float64 (slow on any GPU),
        # then back to float32 for the fused pass.
        y = F.conv2d(x.double(), self.conv.weight.double(), self.conv.bias.double()).float()
        return _ext.pool_tanh_scale_bias(y, self.bias, self.pool_kernel_size, float(self.scaling_factor))
'''

_SEED1_WRONG_CUDA = '''\
    def forward(self, x):
        y = F.conv2d(x, self.conv.weight)  # BUG: drops self.conv.bias
        return _ext.pool_tanh_scale_bias(y, self.bias, self.pool_kernel_size, float(self.scaling_factor))
'''

_SEED1_DRAFT_CUDA = '''\
"""Seed problem 1, first draft: cuDNN conv, then one kernel that pools first and applies
tanh * scale + bias once per pooled output (tanh, a positive scale and a per-channel bias are
monotone, so max(f(v)) == f(max(v)))."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <cuda_runtime.h>

__global__ void pool_tanh_scale_bias_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                                            float* __restrict__ out, int C, int H, int W, int OH, int OW,
                                            int k, float scale, long long total) {
  const long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int ow = (int)(idx % OW);
  const int oh = (int)((idx / OW) % OH);
  const long long plane = idx / ((long long)OW * OH);
  const int c = (int)(plane % C);
  const float* win = y + (plane * H + (long long)oh * k) * W + (long long)ow * k;
  float m = __int_as_float(0xff800000);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) m = fmaxf(m, win[i * W + j]);
  out[idx] = tanhf(m) * scaling + bias[c];
}

int launch_pool_tanh_scale_bias(const float* y, const float* bias, float* out, long long N, long long C,
                                long long H, long long W, int k, float scale, void* stream) {
  const long long OH = H / k, OW = W / k, total = N * C * OH * OW;
  if (total == 0) return 0;
  pool_tanh_scale_bias_kernel<<<(unsigned)((total + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      y, bias, out, (int)C, (int)H, (int)W, (int)OH, (int)OW, k, scale, total);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

int launch_pool_tanh_scale_bias(const float* y, const float* bias, float* out, long long N, long long C,
                                long long H, long long W, int k, float scale, void* stream);

torch::Tensor pool_tanh_scale_bias(torch::Tensor y, torch::Tensor bias, int64_t k, double scale) {
  TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.dim() == 4, "y: 4-d float32 CUDA");
  const c10::cuda::CUDAGuard guard(y.device());
  y = y.contiguous();
  auto b = bias.contiguous();
  auto out = torch::empty({y.size(0), y.size(1), y.size(2) / k, y.size(3) / k}, y.options());
  const int err = launch_pool_tanh_scale_bias(y.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
                                              y.size(0), y.size(1), y.size(2), y.size(3), (int)k, (float)scale,
                                              c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "launch failed: ", cudaGetErrorString((cudaError_t)err));
  return out;
}
"""

_ext = load_inline(name="kl_seed1_cuda_draft", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                   functions=["pool_tanh_scale_bias"], extra_cflags=["-O1"], extra_cuda_cflags=["-O3"],
                   no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scaling_factor = scaling_factor
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.pool_kernel_size = pool_kernel_size

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        return _ext.pool_tanh_scale_bias(y, self.bias, self.pool_kernel_size, float(self.scaling_factor))
'''


# -- seed problem 2: conv -> BatchNorm2d -> *scale ----------------------------------------------------
_SEED2_WRONG_CPU = '''\
    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        bn = self.bn
        scale = float(self.scaling_factor)
        if not bn.training:  # BUG: inverted; train mode gets the running statistics, eval the batch's
            bn.num_batches_tracked.add_(1)
            momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
            return _ext.bn_scale_train(y, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                       momentum, bn.eps, scale)
        return _ext.bn_scale_eval(y, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps, scale)
'''

_SEED2_SLOW_CPU = ('''\
    def forward(self, x):
        # First version, correctness before speed: the convolution one output row at a time, in
        # float64, then back to float32; the C++ passes do the BatchNorm and the scale.
''' + _ROWWISE_CONV + '''\
        bn = self.bn
        scale = float(self.scaling_factor)
        if bn.training:
            bn.num_batches_tracked.add_(1)
            momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
            return _ext.bn_scale_train(y, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                       momentum, bn.eps, scale)
        return _ext.bn_scale_eval(y, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps, scale)
''')

_SEED2_WRONG_CUDA = '''\
    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        bn = self.bn
        momentum = -1.0
        if bn.training:
            bn.num_batches_tracked.add_(1)
            momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
        # BUG: the statistics switch is inverted (batch statistics in eval mode, running ones in train).
        return _ext.bn_scale(y, bn.weight, bn.bias, bn.running_mean, bn.running_var, not bn.training,
                             momentum, bn.eps, float(self.scaling_factor))
'''

_SEED2_SLOW_CUDA = '''\
    def forward(self, x):
        # First version, correctness before speed: the convolution in float64 (slow on any GPU),
        # then back to float32 for the BatchNorm kernels.
        y = F.conv2d(x.double(), self.conv.weight.double(), self.conv.bias.double()).float()
        bn = self.bn
        momentum = -1.0
        if bn.training:
            bn.num_batches_tracked.add_(1)
            momentum = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
        return _ext.bn_scale(y, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.training,
                             momentum, bn.eps, float(self.scaling_factor))
'''

_SEED2_DRAFT_CPU = '''\
"""Seed problem 2, first draft: torch conv, then one C++ pass per channel: batch statistics in
double, then y * a[c] + b[c] (BatchNorm and the scale folded into one affine)."""

import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor bn_scale_train(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, double eps, double scale) {
  y = y.contiguous();
  const int64_t N = y.size(0), C = y.size(1), HW = y.size(2) * y.size(3);
  auto out = torch::empty_like(y);
  const float* yp = y.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float* g = gamma.data_ptr<float>();
  const float* be = beta.data_ptr<float>();
  #pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    double s = 0.0, q = 0.0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) { const double v = yp[(n * C + c) * HW + i]; s += v; q += v * v; }
    const double mean = s / (N * HW), var = q / (N * HW) - mean * mean;
    const double k = g[c] / std::sqrt(var + eps);
    const float a = (float)(k * scale), b = (float)((be[c] - mean * k) * scale);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) op[(n * C + c) * HW + i] = yp[(n * C + c) * HW + i] * a + b;
  }
  return outt;
}
"""

_ext = load_inline(name="kl_seed2_cpu_draft", cpp_sources=CPP_SOURCE, functions=["bn_scale_train"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        return _ext.bn_scale_train(y, self.bn.weight, self.bn.bias, self.bn.eps, float(self.scaling_factor))
'''

_SEED2_DRAFT_CUDA = '''\
"""Seed problem 2, first draft: cuDNN conv, per-channel statistics through torch, then one kernel
for y * a[c] + b[c] (BatchNorm and the scale folded into one affine)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <cuda_runtime.h>

__global__ void channel_affine_kernel(const float* __restrict__ y, const float* __restrict__ a,
                                      const float* __restrict__ b, float* __restrict__ out, long long HW,
                                      int C, long long total) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int c = (int)((i / HW) % C);
  out[i] = y[i] * a[c] + b[c];
}

int launch_channel_affine(const float* y, const float* a, const float* b, float* out, long long HW, int C,
                          long long total, void* stream) {
  if (total == 0) return 0;
  channel_affine_kernel<<<(unsigned)((total + 255) / 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      y, a, b, out, HW, C, totl);
  return (int)cudaGetLastError();
}
"""

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

int launch_channel_affine(const float* y, const float* a, const float* b, float* out, long long HW, int C,
                          long long total, void* stream);

torch::Tensor channel_affine(torch::Tensor y, torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32 && y.dim() == 4, "y: 4-d float32 CUDA");
  const c10::cuda::CUDAGuard guard(y.device());
  y = y.contiguous();
  auto out = torch::empty_like(y);
  const int err = launch_channel_affine(y.data_ptr<float>(), a.contiguous().data_ptr<float>(),
                                        b.contiguous().data_ptr<float>(), out.data_ptr<float>(),
                                        y.size(2) * y.size(3), (int)y.size(1), y.numel(),
                                        c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "launch failed: ", cudaGetErrorString((cudaError_t)err));
  return out;
}
"""

_ext = load_inline(name="kl_seed2_cuda_draft", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE,
                   functions=["channel_affine"], extra_cflags=["-O1"], extra_cuda_cflags=["-O3"],
                   no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        var, mean = torch.var_mean(y, dim=(0, 2, 3), unbiased=False)
        k = self.bn.weight / torch.sqrt(var + self.bn.eps)
        return _ext.channel_affine(y, k * self.scaling_factor, (self.bn.bias - mean * k) * self.scaling_factor)
'''


def _variant(example: str, forward: str, docstring: str) -> Callable[[Path], str]:
    def build(examples: Path) -> str:
        source = replace_forward(_read(examples, example), forward, docstring=docstring)
        if "torch." in forward and not re.search(r"^import torch$", source, re.MULTILINE):
            first_import = re.search(r"^(import|from) ", source, re.MULTILINE)
            assert first_import is not None
            source = source[: first_import.start()] + "import torch\n" + source[first_import.start():]
        return source

    return build


def _file(example: str) -> Callable[[Path], str]:
    return lambda examples: _read(examples, example)


def _literal(text: str) -> Callable[[Path], str]:
    return lambda _examples: text


_SLOW_DOC = ("{title}, first version (correct, deliberately unoptimised): {how}. Same extension as the "
             "fast version, byte for byte.")
_WRONG_DOC = "{title}, with a bug: {how}. Same extension as the correct version, byte for byte."

#: (problem id, target) -> candidate key -> builder(examples_dir) -> source.
CANDIDATES: dict[tuple[str, str], dict[str, Callable[[Path], str]]] = {
    ("level2/conv_tanh_scale_bias_maxpool", "cpu"): {
        "draft": _file("seed1_cpu_compile_error.py"),
        "wrong": _file("seed1_cpu_wrong.py"),
        "slow": _variant("seed1_cpu.py", _SEED1_SLOW_CPU, _SLOW_DOC.format(
            title="Seed problem 1 on the CPU target", how="a row-by-row float64 convolution")),
        "fast": _file("seed1_cpu.py"),
    },
    ("level2/conv_tanh_scale_bias_maxpool", "cuda"): {
        "draft": _literal(_SEED1_DRAFT_CUDA),
        "wrong": _variant("seed1_cuda.py", _SEED1_WRONG_CUDA, _WRONG_DOC.format(
            title="Seed problem 1 on CUDA", how="forward drops the convolution's own bias")),
        "slow": _variant("seed1_cuda.py", _SEED1_SLOW_CUDA, _SLOW_DOC.format(
            title="Seed problem 1 on CUDA", how="the convolution in float64")),
        "fast": _file("seed1_cuda.py"),
    },
    ("level2/conv_bn_scale_train", "cpu"): {
        "draft": _literal(_SEED2_DRAFT_CPU),
        "wrong": _variant("seed2_train_cpu.py", _SEED2_WRONG_CPU, _WRONG_DOC.format(
            title="Seed problem 2 on the CPU target", how="the train/eval switch is inverted")),
        "slow": _variant("seed2_train_cpu.py", _SEED2_SLOW_CPU, _SLOW_DOC.format(
            title="Seed problem 2 on the CPU target", how="a row-by-row float64 convolution")),
        "fast": _file("seed2_train_cpu.py"),
    },
    ("level2/conv_bn_scale_train", "cuda"): {
        "draft": _literal(_SEED2_DRAFT_CUDA),
        "wrong": _variant("seed2_train_cuda.py", _SEED2_WRONG_CUDA, _WRONG_DOC.format(
            title="Seed problem 2 on CUDA", how="the batch/running statistics switch is inverted")),
        "slow": _variant("seed2_train_cuda.py", _SEED2_SLOW_CUDA, _SLOW_DOC.format(
            title="Seed problem 2 on CUDA", how="the convolution in float64")),
        "fast": _file("seed2_train_cuda.py"),
    },
}
# The eval variant of seed problem 2: the CPU example handles both modes; on CUDA the unfolded train
# example is the slow-but-correct step and the folded eval example the fast one.
CANDIDATES[("level2/conv_bn_scale_eval", "cpu")] = dict(CANDIDATES[("level2/conv_bn_scale_train", "cpu")])
CANDIDATES[("level2/conv_bn_scale_eval", "cuda")] = {
    "draft": _literal(_SEED2_DRAFT_CUDA),
    "wrong": CANDIDATES[("level2/conv_bn_scale_train", "cuda")]["wrong"],
    "slow": _file("seed2_train_cuda.py"),
    "fast": _file("seed2_eval_cuda.py"),
}


def candidate_source(problem_id: str, target: str, key: str, *, examples_dir: Path = EXAMPLES_DIR) -> str:
    """One candidate's source (reads the examples now)."""
    return CANDIDATES[(problem_id, target)][key](examples_dir)


# -- level 1: one example per problem and target, its draft a one-call edit of it ----------------------
@dataclass(frozen=True)
class Level1Demo:
    """The scripted demo of a bundled level-1 problem (``problems/bundled/level1/<name>.py``).

    The fast candidate is ``examples/level1/<name>_<target>.py``; the draft is that file with
    ``fast_call`` (the extension call in ``forward``) replaced by ``draft_call``, so it shares the
    build: a draft costs no compile. ``draft`` says whether it is ``wrong`` (fails the trials) or
    ``slow`` (correct, another code path of the same kernel); ``draft_note`` is what it does.
    """

    name: str
    draft: str
    fast_call: str
    draft_call: str
    draft_note: str

    @property
    def problem_id(self) -> str:
        return f"level1/{self.name}"

    def example(self, target: str) -> str:
        return f"level1/{self.name}_{target}.py"


LEVEL1_DEMOS: tuple[Level1Demo, ...] = (
    Level1Demo("argmax", "wrong", "_ext.argmax_dim(x, self.dim)", "_ext.argmax_dim(x, -1)",
               "it reduces the last dimension (argmax's habitual dim=-1) instead of the model's dim"),
    Level1Demo("avg_pool2d", "wrong", "self.padding, True)", "self.padding, False)",
               "it divides border windows by their in-bounds count (count_include_pad=False)"),
    Level1Demo("bmm", "slow", "_ext.bmm(A, B, True)", "_ext.bmm(A, B, False)",
               "one dot product per output, B read down its columns"),
    Level1Demo("conv2d", "wrong", "self.conv.bias, self.padding, True)", "self.conv.bias, self.padding, False)",
               "it leaves out the convolution's bias"),
    Level1Demo("depthwise_conv2d", "wrong", "self.conv.bias, self.padding, False)",
               "self.conv.bias, self.padding, True)",
               "it flips the filter (a textbook convolution; nn.Conv2d is a cross-correlation)"),
    Level1Demo("gelu_tanh", "wrong", "_ext.gelu(x, False)", "_ext.gelu(x, True)",
               "it computes the erf GELU, not the tanh approximation this problem spells out"),
    Level1Demo("layer_norm", "wrong", "self.norm.eps, False)", "self.norm.eps, True)",
               "it divides the variance by n - 1; LayerNorm uses the biased variance"),
    Level1Demo("matmul", "slow", "_ext.matmul(A, B, True)", "_ext.matmul(A, B, False)",
               "one dot product per output, B read down its columns"),
    Level1Demo("matmul_bf16", "slow", "_ext.matmul_bf16(A, B, True)", "_ext.matmul_bf16(A, B, False)",
               "one dot product per output, B read down its columns"),
    Level1Demo("max_pool2d", "wrong", "self.padding, False)", "self.padding, True)",
               "padded positions take part as zeros, so all-negative border windows give 0"),
    Level1Demo("max_reduction", "wrong", "_ext.max_dim(x, self.dim)", "_ext.max_dim(x, 1)",
               "it reduces dimension 1, not the model's dim 2"),
    Level1Demo("softmax", "slow", "_ext.softmax_lastdim(x, True)", "_ext.softmax_lastdim(x, False)",
               "three passes over each row, every exp computed twice"),
    Level1Demo("sum_reduction", "wrong", "_ext.sum_dim(x, self.dim, False)", "_ext.sum_dim(x, self.dim, True)",
               "it keeps the reduced dimension (keepdim=True)"),
)


def _draft_of(demo: Level1Demo, target: str) -> Callable[[Path], str]:
    def build(examples: Path) -> str:
        fast = _read(examples, demo.example(target))
        if fast.count(demo.fast_call) != 1:
            raise ValueError(f"{demo.example(target)} must call {demo.fast_call!r} exactly once")
        body = fast.replace(demo.fast_call, demo.draft_call)
        note = f"First draft ({demo.draft}): {demo.draft_note}. Same extension, byte for byte."
        return _DOCSTRING.sub(lambda m: f'"""{m.group(1).strip()}\n\n{note}\n"""', body, count=1)

    return build


for _demo in LEVEL1_DEMOS:
    for _target in ("cpu", "cuda"):
        CANDIDATES[(_demo.problem_id, _target)] = {_demo.draft: _draft_of(_demo, _target),
                                                    "fast": _file(_demo.example(_target))}
