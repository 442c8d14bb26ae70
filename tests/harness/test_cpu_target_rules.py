"""The cpu target's rules that need no compile: CPU timing measures the op and says when the host
was loaded, RANDOM problems' timed calls are seeded reproducibly, and the cuda target on a machine
without a GPU or toolkit is an infra error before any compile."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import harness.meter.noise
import harness.toolchain
from harness import HarnessOptions, evaluate
from harness.meter.drive import CallPlan, drive
from harness.meter.noise import timing_of
from harness.sandboxed.meter import call_inputs
from problems import parse_problem
from tests.support.meter import metered_child
from vocabulary.verdict import ErrorKind, Stage, Status

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


def _plan(**changes: object) -> CallPlan:
    base = CallPlan(warmup_ms=5, min_warmup_calls=2, min_repeats=50, max_repeats=50, target_rel_stderr=0.0,
                    max_time_s=10.0, sets=1)
    return CallPlan(**{**base.__dict__, **changes})


def test_cpu_timing_of_a_small_op_measures_the_op_not_a_cache_flush(harness_cache: Path) -> None:
    # A 32 MB flush before each call once made a ~26 us op read 58.8 ms on this kind of host.
    with metered_child("fn = torch.relu\nsets = [[torch.randn(4096)]]\n", harness_cache) as channel:
        run = drive(channel, _plan(), timeout_s=120)
    timing = timing_of([c.sample_ms for c in run.timed], cuda=False)
    assert timing.clock == "monotonic"
    assert timing.median_ms < 0.5, timing


def test_a_loaded_host_makes_the_cpu_timing_noisy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.meter.noise, "_getloadavg", lambda: (64.0, 64.0, 64.0))
    timing = timing_of([0.1] * 20, cuda=False)
    assert any(w.startswith("noisy: the host was loaded (load average 64.0") for w in timing.warnings)


def test_seeded_calls_draw_the_same_random_numbers_as_their_recomputation(harness_cache: Path) -> None:
    setup = """
x = torch.randn(256)
def fn(t):
    return torch.nn.functional.dropout(t, p=0.5, training=True)
sets = [[x]]
"""
    with metered_child(setup, harness_cache) as channel:
        run = drive(channel, _plan(min_repeats=20, max_repeats=20, audits=10, audit_each_set=True, seed_forward=True),
                    timeout_s=120)
    torch.manual_seed(0)
    x = torch.randn(256)
    assert len(run.audits) >= 2
    try:
        for audit in run.audits:
            got = torch.frombuffer(bytearray(os.pread(audit.fd, audit.nbytes, 0)), dtype=torch.float32)
            torch.manual_seed(audit.call.forward_seed)
            (inputs,) = call_inputs([x], audit.call.input_seed, CPU)
            assert torch.equal(torch.nn.functional.dropout(inputs, p=0.5, training=True), got)
    finally:
        run.close()


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
