"""On the GPU host (`pytest -m gpu`): the CUDA styles of ``load_inline`` models and people write
compile through the referee with the headers a worker warms (issue 24, item 3; the CPU matrix is
tests/harness/test_load_inline_styles.py). KernelBench's split (a declaration in ``cpp_sources``,
the kernel and its wrapper with torch's header in ``cuda_sources``), and a ``cpp_sources`` that
includes torch's header after load_inline's implicit one (the case that failed with a PCH)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee, warm_headers
from problems import load_problem
from vocabulary.evaluation import Depth
from vocabulary.verdict import Status

pytestmark = pytest.mark.gpu

KERNEL = r"""#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void softmax_rows_kernel(const float* x, float* out, int64_t cols) {
  const float* row = x + blockIdx.x * cols;
  float* dst = out + blockIdx.x * cols;
  __shared__ float peak, total;
  if (threadIdx.x == 0) {
    float m = row[0];
    for (int64_t c = 1; c < cols; ++c) m = fmaxf(m, row[c]);
    float s = 0.f;
    for (int64_t c = 0; c < cols; ++c) s += expf(row[c] - m);
    peak = m; total = s;
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = expf(row[c] - peak) / total;
}

torch::Tensor softmax_rows(torch::Tensor x) {
  x = x.contiguous();
  auto out = torch::empty_like(x);
  softmax_rows_kernel<<<x.size(0), 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), x.size(1));
  return out;
}
"""
DECLARATION = "torch::Tensor softmax_rows(torch::Tensor x);"

CANDIDATE = '''import os
import tempfile
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

KERNEL = {kernel!r}

ext = load_inline({arguments})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.softmax_rows(x)
'''

#: style: load_inline's arguments besides the name and the kernel's cuda_sources.
STYLES = {
    # KernelBench's own form, its flags, verbose.
    "kernelbench": f'cpp_sources={DECLARATION!r}, functions=["softmax_rows"], verbose=True, '
                   'extra_cflags=[""], extra_ldflags=[""]',
    # torch's header first in cpp_sources as well, after load_inline's implicit include (-O3: a warmed PCH).
    "implicit_include_o3": f'cpp_sources="#include <torch/extension.h>\\n" + {DECLARATION!r}, '
                           'functions=["softmax_rows"], extra_cflags=["-O3"], extra_cuda_cflags=["-O3"]',
    # with_cuda spelled out, a build directory of its own, sources as lists, functions as a string.
    "with_cuda_build_directory": f'cpp_sources=[{DECLARATION!r}], functions="softmax_rows", with_cuda=True, '
                                 'build_directory=tempfile.mkdtemp()',
}


def candidate(style: str) -> str:
    cuda = "[KERNEL]" if style == "with_cuda_build_directory" else "KERNEL"
    return CANDIDATE.format(kernel=KERNEL, arguments=f'name="kl_cuda_style_{style}", cuda_sources={cuda}, '
                                                     f'{STYLES[style]}')


@pytest.fixture(scope="module")
def referee(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Referee]:
    kept = os.environ.get("KERNELLOOP_TEST_CACHE")
    cache = Path(kept) if kept else tmp_path_factory.mktemp("gpu-styles-cache")
    options = HarnessOptions(cache_dir=cache, secret_seed=1, compile_baseline=False)
    assert warm_headers("cuda", options)  # what a worker does at start-up
    with Referee(load_problem("level1/softmax"), "cuda", options) as referee:
        yield referee


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("style", list(STYLES))
def test_each_cuda_style_compiles_and_computes(referee: Referee, style: str) -> None:
    verdict = referee.evaluate(candidate(style), depth=Depth.CORRECTNESS)
    assert verdict.status is Status.PASS, f"{verdict.message}\n{verdict.log[-3000:]}"
    assert verdict.compile is not None
    (extension,) = verdict.compile.extensions
    print(style, extension.to_dict())
