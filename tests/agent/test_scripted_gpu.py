"""On an H200 (`pytest -m gpu`): the scripted LLM's script of seed problem 1 on cuda, end to end.

The real referee (sandboxed nvcc builds, CUDA trials, timing against eager and torch.compile);
needs torch and pytest only. Figures go to stdout (run with -s) and, when KERNELLOOP_GPU_REPORT
is set, to that JSON file.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agent import StopReason, run_job
from agent.providers.scripted import ScriptedProvider
from harness import HarnessOptions, Referee
from problems import load_problem
from tests.support.agents import SEED1, spec_for
from tests.support.doubles import MemoryRecorder
from tests.support.gpu import report

pytestmark = pytest.mark.gpu


def test_seed1_cuda_scripted_end_to_end(tmp_path_factory: pytest.TempPathFactory) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    kept = os.environ.get("KERNELLOOP_TEST_CACHE")
    cache = Path(kept) if kept else tmp_path_factory.mktemp("agent-gpu-cache")
    problem = load_problem(SEED1)
    provider = ScriptedProvider.for_problem(SEED1, "cuda")
    recorder = MemoryRecorder()
    started = time.monotonic()
    options = HarnessOptions(cache_dir=cache)
    with Referee(problem, "cuda", options) as referee:
        result = run_job(spec_for(problem, "cuda"), evaluator=referee, recorder=recorder, provider=provider)
    wall_s = time.monotonic() - started

    attempts = [(a.tool, a.verdict.status, a.verdict.stage) for a in recorder.attempts]
    rows = []
    for a in recorder.attempts:
        v = a.verdict.to_dict()
        rows.append({"tool": a.tool, "status": v["status"], "stage": v["stage"],
                     "median_ms": (v.get("timing") or {}).get("median_ms"),
                     "eager_ms": (v.get("baselines") or {}).get("eager_ms"),
                     "compile_ms": (v.get("baselines") or {}).get("torch_compile_ms"),
                     "speedup_vs_eager": v.get("speedup_vs_eager"), "speedup_vs_compile": v.get("speedup_vs_compile"),
                     "pct_of_sol": v.get("pct_of_sol"), "compile_s": v.get("compile_s"),
                     "kernels": (v.get("compile") or {}).get("kernels")})
    best = result.best.to_dict() if result.best else {}
    report({"test": "agent_scripted_seed1_cuda", "wall_s": wall_s, "reason": result.reason.value,
             "trajectory": result.trajectories[0].reason.value, "attempts": rows,
             "best": {k: best.get(k) for k in ("tool", "speedup_vs_eager", "speedup_vs_compile", "pct_of_sol")}
             | {"median_ms": (best.get("timing") or {}).get("median_ms")},
             "device": (best.get("provenance") or {}).get("device"),
             "tool_results": recorder.tool_results()})

    assert result.trajectories[0].reason is StopReason.SUBMITTED, result
    assert attempts == [("compile", "error", "compile"), ("check_correctness", "fail", "correctness"),
                        ("check_correctness", "pass", "correctness"), ("benchmark", "pass", "done"),
                        ("benchmark", "pass", "done"), ("profile", "pass", "done")]
    results = recorder.tool_results()
    assert "cuda.cu(17)" in results[1] and "scaling" in results[1]
    assert result.best is not None and result.best.source == provider.source("fast")
    assert (result.best.verdict.speedup_vs_eager or 0) > 1.2
    assert recorder.attempts[4].verdict.timing.median_ms < recorder.attempts[3].verdict.timing.median_ms
