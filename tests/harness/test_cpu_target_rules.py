"""The cpu target's rules that need no compile: CPU timing measures the op and says when the host
was loaded, RANDOM problems' timed calls are seeded reproducibly, and the cuda target on a machine
without a GPU or toolkit is an infra error before any compile."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import harness.timing
import harness.toolchain
from harness import ErrorKind, HarnessOptions, Stage, Status, TimingOptions, evaluate
from harness.contract import forward_seed
from harness.timing import scaled_inputs, time_callable
from problems import parse_problem

CPU = torch.device("cpu")
PROBLEM = '''import torch
import torch.nn as nn
n = 8
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
    def forward(self, x):
        return x * self.w
def get_inputs():
    return [torch.randn(4, n)]
def get_init_inputs():
    return [n]
'''


def test_cpu_timing_of_a_small_op_measures_the_op_not_a_cache_flush() -> None:
    # A 32 MB flush before each call once made a ~26 us op read 58.8 ms on this kind of host.
    x = torch.randn(4096)
    run = time_callable(torch.relu, [[x]], device=CPU, options=TimingOptions(min_repeats=50))
    assert run.timing.clock == "perf_counter"
    assert run.timing.median_ms < 0.5, run.timing


def test_a_loaded_host_makes_the_cpu_timing_noisy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.timing, "_getloadavg", lambda: (64.0, 64.0, 64.0))
    run = time_callable(torch.relu, [[torch.randn(1024)]], device=CPU, options=TimingOptions(min_repeats=5))
    assert any(w.startswith("noisy: the host was loaded (load average 64.0") for w in run.timing.warnings)


def test_seeded_calls_draw_the_same_random_numbers_as_their_recomputation() -> None:
    x = torch.randn(256)

    def dropout_like(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(t, p=0.5, training=True)

    run = time_callable(dropout_like, [[x]], device=CPU, options=TimingOptions(min_repeats=20, recheck_every=5),
                        keep_outputs=True, seed_calls=True)
    assert len(run.kept) >= 2
    for call, _, out in run.kept:
        torch.manual_seed(forward_seed(0, call))
        assert torch.equal(dropout_like(*scaled_inputs([x], call)), out)


def test_cuda_toolkit_is_found_where_torch_looks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.toolchain, "_DEFAULT_CUDA_HOME", tmp_path / "absent")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert harness.toolchain.cuda_toolkit_home() is None
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    (tmp_path / "cuda" / "bin" / "nvcc").write_text("#!/bin/sh\n")
    assert harness.toolchain.cuda_toolkit_home() == tmp_path / "cuda"


@pytest.mark.slow
def test_cuda_target_without_a_gpu_is_an_infra_error_before_any_compile(
        tmp_path: Path, harness_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.toolchain, "_NVIDIA_DEVICE", tmp_path / "nvidiactl")
    problem = parse_problem(PROBLEM, problem_id="user/scale")
    # This source would fail to compile: the verdict must not get that far.
    verdict = evaluate(problem, "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
                       "ext = load_inline(name='x', cpp_sources='not c++', functions=['f'])\n", "cuda",
                       HarnessOptions(cache_dir=harness_cache))
    assert verdict.status is Status.ERROR and verdict.error_kind is ErrorKind.INFRA
    assert verdict.stage is Stage.COMPILE and verdict.compile is None
    assert "the cuda target cannot run on this machine: no NVIDIA GPU" in verdict.message


def test_a_compile_only_evaluation_needs_the_toolkit_not_a_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.toolchain, "_NVIDIA_DEVICE", tmp_path / "nvidiactl")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    (tmp_path / "cuda" / "bin" / "nvcc").write_text("#!/bin/sh\n")
    assert harness.toolchain.cuda_unavailable(gpu=False) is None
    assert "no NVIDIA GPU" in (harness.toolchain.cuda_unavailable() or "")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "absent"))
    monkeypatch.setattr(harness.toolchain, "_DEFAULT_CUDA_HOME", tmp_path / "absent")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert "no CUDA toolkit" in (harness.toolchain.cuda_unavailable(gpu=False) or "")
