"""Every style of CPU ``load_inline`` a model or a person writes compiles through the referee,
with the precompiled torch headers a worker warms in place (issue 24, item 3).

The commonest binding starts with ``#include <torch/extension.h>`` and leaves load_inline's
implicit headers on, so the file g++ compiles includes the header twice; with a PCH offered, that
failed with "fatal error: .../pch/<key>/torch/extension.h: No such file or directory". The
matrix: one build per style (builds take ~30 s each on two cores, so styles that differ only in
their flags share one source), against the PCHs a worker on this host warms: every common flag set
(the playbook's ``-O3 -fopenmp``, KernelBench's ``[""]``, ``-O3``) from 4 cores, the playbook's
alone below (`worker.warmup`: on two cores each other header would take both cores for minutes,
so `make test` on the 2-core CI machine builds no header a 2-core worker never builds). A style
whose flags have no warmed header compiles without one, and its build record says which headers
are prepared. CUDA styles build ``main.cpp`` the same way (the PCH is offered to the C++ compile
only), all three headers warmed: tests/gpu/test_load_inline_styles_gpu.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee
from harness.compiler import PCH_FLAG_SETS
from harness.protocol.build import HeaderFlags
from problems import load_problem
from vocabulary.evaluation import Depth, Target
from vocabulary.verdict import Status
from worker.warmup import warms_prescribed_only

pytestmark = pytest.mark.slow

#: The binding as models write it most: torch's header first, then the code (row softmax).
BINDING = r"""#include <torch/extension.h>
#include <cmath>

torch::Tensor softmax_rows(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "x: 2-D float32");
  x = x.contiguous();
  auto out = torch::empty_like(x);
  const int64_t rows = x.size(0), cols = x.size(1);
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  #pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    float peak = src[r * cols];
    for (int64_t c = 1; c < cols; ++c) peak = std::fmax(peak, src[r * cols + c]);
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      dst[r * cols + c] = std::exp(src[r * cols + c] - peak);
      sum += dst[r * cols + c];
    }
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = (float)(dst[r * cols + c] / sum);
  }
  return out;
}
"""

#: KernelBench's split on the CPU: a declaration in one source, the definition (with its own
#: include, after code) in the next; load_inline joins them after its implicit include.
DECLARATION = "torch::Tensor softmax_rows(torch::Tensor x);"

#: A binding that writes its own module instead of ``functions=``.
OWN_MODULE = BINDING + """
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("softmax_rows", &softmax_rows, "row softmax");
}
"""

CANDIDATE = '''import os
import tempfile
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = {source!r}

ext = load_inline({arguments})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.softmax_rows(x)
'''

#: style: (cpp_sources expression, the rest of load_inline's arguments, its flags' header). The
#: first is the user's case of the issue (the playbook's flags, so the trusted builder offers the
#: prescribed PCH).
PLAYBOOK, NO_FLAGS, O3 = PCH_FLAG_SETS[Target.CPU]
STYLES: dict[str, tuple[str, str, HeaderFlags]] = {
    "implicit_include_playbook_flags": (
        "SOURCE", 'functions=["softmax_rows"], extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"]',
        PLAYBOOK),
    # KernelBench's flags (no -O: the PCH of no flags), verbose and a build directory of its own
    # (not delegable: built in the compile sandbox, which uses the published PCHs).
    "kernelbench_flags_verbose_build_directory": (
        "SOURCE", 'functions=["softmax_rows"], extra_cflags=[""], extra_ldflags=[""], verbose=True, '
                  'build_directory=os.path.join(tempfile.gettempdir(), "kb_softmax_build")', NO_FLAGS),
    # -O3 alone, the source as a list, functions as a string, with_cuda spelled out.
    "o3_list_sources_with_cuda_false": (
        "[SOURCE]", 'functions="softmax_rows", extra_cflags=["-O3"], with_cuda=False', O3),
    "declaration_then_definition": (
        f"[{DECLARATION!r}, SOURCE]", 'functions=["softmax_rows"], extra_cflags=["-O3", "-fopenmp"], '
                                      'extra_ldflags=["-fopenmp"]', PLAYBOOK),
    "own_pybind_module": ("SOURCE", 'extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"]', PLAYBOOK),
}
#: The headers a worker on this host warms at start-up (`worker.warmup`).
WARMED = (PLAYBOOK,) if warms_prescribed_only() else PCH_FLAG_SETS[Target.CPU]


def candidate(style: str) -> str:
    sources, rest, _ = STYLES[style]
    source = OWN_MODULE if style == "own_pybind_module" else BINDING
    return CANDIDATE.format(source=source, arguments=f'name="kl_style_{style}", cpp_sources={sources}, {rest}')


@pytest.fixture(scope="module")
def referee(harness_cache: Path) -> Iterator[Referee]:
    options = HarnessOptions(cache_dir=harness_cache, secret_seed=1, compile_baseline=False)
    with Referee(load_problem("level1/softmax"), "cpu", options) as referee:
        assert referee.warm_headers(WARMED)  # what a worker on this host does at start-up
        yield referee


# The first also waits for the module's warm-up: one to three PCH builds on a fresh cache, 1-5 minutes
# each on a busy 2-core host (cached in KERNELLOOP_TEST_CACHE after that).
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("style", list(STYLES))
def test_each_style_compiles_with_the_warmed_headers(referee: Referee, style: str) -> None:
    # The case is also checked for what it computes; the others only need to build.
    depth = Depth.CORRECTNESS if style == "implicit_include_playbook_flags" else Depth.COMPILE
    verdict = referee.evaluate(candidate(style), depth=depth)
    assert verdict.status is Status.PASS, f"{verdict.message}\n{verdict.log[-3000:]}"
    assert verdict.compile is not None
    (extension,) = verdict.compile.extensions
    if extension.cached:
        return
    header = extension.pch
    assert header is not None
    if STYLES[style][2] in WARMED:  # built now: its C++ compile was offered (and used) the warmed PCH
        assert header.status == "used", header
    elif header.status != "used":  # none for its flags (a kept cache may hold one): the record says so
        assert header.status == "missing" and header.reason is not None, header
        assert "-fopenmp -O3" in header.reason.partition("prepared: ")[2], header
