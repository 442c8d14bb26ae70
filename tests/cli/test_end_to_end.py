"""``submit`` → ``watch`` → ``replay`` (→ the exported file) against a real ``kernelloop up``:
the embedded service (SQLite, no Redis, one CPU worker), the offline ``scripted`` LLM on seed
problem 1's CPU variant, every attempt compiled, checked and timed by the real referee.

The service and the replay share the session's harness cache (``KERNELLOOP_TEST_CACHE``), so the
scripted LLM's kernels are built once (the examples' tests build the same extensions) and the
replay finds the worker's cached baselines under ``<cache>/baselines``: that it re-measures them
anyway is what this test checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from harness import HarnessOptions
from harness.problemsandbox import compiler_cache_dir, compiler_cache_env
from problems import load_problem
from tests.support.cli import KERNELLOOP, Embedded, api_env, run
from tests.support.dashboard import SEED_PROBLEM

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_submit_watch_replay_against_kernelloop_up(embedded: Embedded, tmp_path: Path, harness_cache: Path) -> None:
    env = api_env(embedded.base_url, embedded.key, tmp_path / "home")

    def kernelloop(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return run(args, env, tmp_path, timeout, program=KERNELLOOP)

    # submit: the job id alone on stdout's first line, then the job followed to its end.
    submitted = kernelloop("submit", SEED_PROBLEM, "--llm", "scripted", "--target", "cpu")
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:] + embedded.log_tail()
    job_id = int(submitted.stdout.splitlines()[0])
    assert f"job {job_id} queued: {SEED_PROBLEM} on cpu (LLM scripted)" in submitted.stderr
    followed = submitted.stdout
    # Not a terminal: one line per attempt as it arrives, then the table and the best attempt.
    assert "attempt   1  compile    error" in followed, followed
    assert " fail " in followed and " pass " in followed, followed
    assert f"job {job_id} is succeeded" in followed and "best: attempt" in followed, followed
    assert f"`kernelloop replay {job_id}`" in followed

    # watch a finished job: the attempts table with status and speedups, exit 0 (succeeded).
    watched = kernelloop("watch", str(job_id), timeout=120)
    assert watched.returncode == 0, watched.stderr
    table = watched.stdout
    # Piped: plain columns on stdout, the table's title a note on stderr.
    assert f"job {job_id} · {SEED_PROBLEM} · cpu · succeeded" in watched.stderr, watched.stderr
    for column in ("status", "median ms", "vs eager", "vs compile", "% SOL"):
        assert column in table, table
    assert "error" in table and "fail" in table and "pass" in table and "×" in table and "★" in table, table

    # replay: the best kernel downloaded, re-judged here, the table with re-measured baselines.
    exported = tmp_path / "best_kernel.py"
    replayed = kernelloop("replay", str(job_id), "--cache-dir", str(harness_cache), "--export", str(exported),
                          "--json")
    assert replayed.returncode in (0, 1), replayed.stderr[-5000:]  # 1: a noisy CPU timing may quarantine it
    local = json.loads(replayed.stdout.strip().splitlines()[-1])
    assert local["correct"] and local["provenance"]["target"] == "cpu"
    assert replayed.returncode == (0 if local["status"] == "pass" else 1)
    report = replayed.stderr  # with --json the table goes to stderr
    for row in ("status", "compile", "correctness", "candidate ms", "eager ms", "torch.compile ms",
                "speedup vs eager", "speedup vs torch.compile", "% of SOL", "difference"):
        assert row in report, report
    assert "eager and torch.compile re-measured in this replay" in report, report
    assert "warning: the job was measured on" not in report  # same machine, same device
    stored = httpx.get(f"{embedded.base_url}/jobs/{job_id}/best", headers={"X-API-Key": embedded.key}).json()[
        "attempt"]["verdict"]
    assert stored["status"] == "pass"
    # Re-measured: not the job's medians. The worker keeps its baselines in the shared cache under
    # the provenance key this replay computes too (unless they were too noisy to keep), so a
    # replay that reused the cache would show the very same numbers.
    assert local["baselines"]["eager_ms"] != stored["baselines"]["eager_ms"]
    assert local["baselines"]["torch_compile_ms"] != stored["baselines"]["torch_compile_ms"]
    cached = [json.loads(p.read_text()) for p in (harness_cache / "baselines").glob("*.json")]
    if any(c["eager_ms"] == stored["baselines"]["eager_ms"] for c in cached):
        reused = kernelloop("replay", str(job_id), "--cache-dir", str(harness_cache), "--reuse-baselines", "--json")
        assert reused.returncode in (0, 1), reused.stderr[-5000:]
        again = json.loads(reused.stdout.strip().splitlines()[-1])
        assert again["baselines"]["eager_ms"] == stored["baselines"]["eager_ms"]
        assert "baselines from this machine's cache" in reused.stderr

    # --export: a standalone file that runs on its own (torch only, outside the repository). Its
    # torch.compile finds the inductor cache the replay's reference wrote, as on a user's machine.
    extensions = harness_cache / "torch-extensions-export"  # the build is kept with the shared cache
    inductor = compiler_cache_env(compiler_cache_dir(HarnessOptions(cache_dir=harness_cache),
                                                     load_problem(SEED_PROBLEM).sha256))
    standalone = subprocess.run(
        [sys.executable, str(exported)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions), "PYTHONPATH": "", "CUDA_VISIBLE_DEVICES": "",
             **inductor},
    )
    assert standalone.returncode == 0, standalone.stdout[-3000:] + standalone.stderr[-3000:]
    assert "trial 0: pass" in standalone.stdout and "correct on cpu" in standalone.stdout, standalone.stdout
    assert "torch.compile" in standalone.stdout and "kernel" in standalone.stdout, standalone.stdout

    # Exit codes of misuse: a job that does not exist.
    missing = kernelloop("replay", "999999", timeout=120)
    assert missing.returncode == 2 and "error:" in missing.stderr
