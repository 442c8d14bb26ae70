"""The `kernelloop` command as a user runs it: files outside the repository, exit codes, JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import QUICK_TIMING_ENV
from tests.support.paths import REPO

pytestmark = pytest.mark.slow


def kernelloop(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(REPO), **QUICK_TIMING_ENV})


def test_eval_on_files_outside_the_repository(tmp_path: Path, harness_cache: Path) -> None:
    problem = tmp_path / "my_problem.py"
    shutil.copy(REPO / "problems/bundled/level2/conv_tanh_scale_bias_maxpool.py", problem)
    candidate = tmp_path / "my_kernel.py"
    shutil.copy(REPO / "examples/seed1_cpu.py", candidate)
    result = kernelloop("eval", str(problem), str(candidate), "--target", "cpu", "--json", "--trials", "2",
                        "--cache-dir", str(harness_cache), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    verdict = json.loads(result.stdout.strip().splitlines()[-1])
    assert verdict["status"] == "pass" and verdict["correct"] is True
    assert verdict["baselines"]["eager_ms"] > 0 and verdict["speedup_vs_eager"] > 0
    # torch.compile of the reference is timed too (the slow part on a CPU, once per problem).
    assert verdict["baselines"]["torch_compile_ms"] is not None or verdict["baselines"]["notes"]
    assert len(verdict["trials"]) >= 3
    assert "PASS" in result.stderr  # the readable table goes to stderr with --json


def test_exit_codes_follow_the_verdict(tmp_path: Path, harness_cache: Path) -> None:
    wrong = kernelloop("eval", "level2/conv_tanh_scale_bias_maxpool", str(REPO / "examples/seed1_cpu_wrong.py"),
                       "--target", "cpu", "--no-compile-baseline", "--cache-dir", str(harness_cache), cwd=tmp_path)
    assert wrong.returncode == 1, wrong.stdout[-3000:] + wrong.stderr[-3000:]
    assert "FAIL" in wrong.stdout and "correctness trials" in wrong.stdout
    broken = kernelloop("eval", "level2/conv_tanh_scale_bias_maxpool",
                        str(REPO / "examples/seed1_cpu_compile_error.py"), "--target", "cpu", "--json",
                        "--cache-dir", str(harness_cache), cwd=tmp_path)
    # The candidate's failure, not misuse (issue 24: it exited 2, the code for misuse).
    assert broken.returncode == 1, broken.stderr[-3000:]
    verdict = json.loads(broken.stdout.strip().splitlines()[-1])
    assert verdict["stage"] == "compile" and "main.cpp:" in verdict["compile"]["errors"]
    # No provenance line of Nones: nothing reached a device.
    assert "None" not in broken.stderr, broken.stderr[-3000:]


def test_unknown_problem_and_missing_candidate_are_usage_errors(tmp_path: Path) -> None:
    result = kernelloop("eval", "level9/nope", "x.py", "--target", "cpu", cwd=tmp_path)
    assert result.returncode == 2 and "unknown problem 'level9/nope'" in result.stderr
    result = kernelloop("eval", "level1/softmax", "missing.py", "--target", "cpu", cwd=tmp_path)
    assert result.returncode == 2 and "not found" in result.stderr


def test_problems_list_shows_every_bundled_problem(tmp_path: Path) -> None:
    result = kernelloop("problems", "list", "--json", cwd=tmp_path)
    assert result.returncode == 0
    listed = json.loads(result.stdout)
    ids = {p["id"] for p in listed}
    assert {"level2/conv_tanh_scale_bias_maxpool", "level2/conv_bn_scale_train", "level2/conv_bn_scale_eval"} <= ids
    assert len(ids) >= 24 and all("source" not in p for p in listed)
