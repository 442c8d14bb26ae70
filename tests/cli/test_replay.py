"""``replay`` re-runs a stored job's best kernel through the real harness (cpu target, seed
problem 1 with examples/seed1_cpu.py), and ``--export`` writes a file that runs on its own.

Builds are content-keyed: with ``KERNELLOOP_TEST_CACHE`` set to a shared cache the C++ extension
is not compiled again, and the exported file builds into a torch extensions folder kept beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from store import Target
from tests.support.cli import client_env, run
from tests.support.dashboard import SEED_PROBLEM, Service, add_attempt, create_running_job, finish, verdict
from tests.support.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: The stored figures: what a job measured on another machine (so the device warning shows).
STORED_DEVICE = "AMD EPYC 9654 96-Core Processor"


def test_replay_runs_the_harness_locally_and_exports_a_standalone_file(
    service: Service, tmp_path: Path, harness_cache: Path
) -> None:
    job_id = create_running_job(service.factory, service.key_id, problem=SEED_PROBLEM, target=Target.CPU)
    kernel = (REPO / "examples" / "seed1_cpu.py").read_text()
    add_attempt(service.factory, job_id, verdict(median_ms=40.0, eager_ms=60.0, compile_ms=55.0,
                                                 device=STORED_DEVICE, target="cpu"), source=kernel)
    finish(service.factory, job_id)
    exported = tmp_path / "job_best.py"
    result = run(
        ["replay", str(job_id), "--cache-dir", str(harness_cache), "--export", str(exported), "--json"],
        client_env(service, tmp_path), tmp_path, timeout=800,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    local = json.loads(result.stdout.strip().splitlines()[-1])
    assert local["status"] == "pass" and local["correct"] and local["provenance"]["target"] == "cpu"
    assert local["baselines"]["eager_ms"] > 0 and local["speedup_vs_eager"] > 0
    table = result.stderr  # with --json the table goes to stderr
    for row in ("status", "compile", "correctness", "candidate ms", "eager ms", "torch.compile ms",
                "speedup vs eager", "speedup vs torch.compile", "% of SOL"):
        assert row in table, table
    assert f"stored ({STORED_DEVICE})" in table and "1.50×" in table  # the stored speedup, next to the local
    assert "replayed (" in table and "difference" in table and "re-measured in this replay" in table
    assert "warning: the job was measured on" in table and STORED_DEVICE in table

    # The exported file: problem + kernel + a torch-only check, runnable anywhere.
    text = exported.read_text()
    assert "CANDIDATE_SOURCE" in text and "PROBLEM_SOURCE" in text and "kernelloop" not in text.split('"""', 2)[2]
    compile(text, str(exported), "exec")
    extensions = Path(os.environ.get("KERNELLOOP_TEST_CACHE") or harness_cache) / "torch-extensions-export"
    standalone = subprocess.run(
        [sys.executable, str(exported), "--device", "cpu", "--no-compile", "--runs", "5", "--trials", "2"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions), "PYTHONPATH": ""},
    )
    assert standalone.returncode == 0, standalone.stdout[-3000:] + standalone.stderr[-3000:]
    assert "trial 0: pass" in standalone.stdout and "trial 1: pass" in standalone.stdout
    assert "correct on cpu" in standalone.stdout and "eager" in standalone.stdout and "kernel" in standalone.stdout


def test_replay_refuses_what_it_cannot_run(service: Service, tmp_path: Path) -> None:
    env = client_env(service, tmp_path)
    queued = create_running_job(service.factory, service.key_id, target=Target.CPU)
    no_best = run(["replay", str(queued)], env, tmp_path)
    assert no_best.returncode == 2 and "no verified attempt yet" in no_best.stderr
    if not os.path.exists("/dev/nvidiactl"):
        cuda_job = create_running_job(service.factory, service.key_id, target=Target.CUDA)
        add_attempt(service.factory, cuda_job, verdict(median_ms=1.0))
        on_cpu_box = run(["replay", str(cuda_job)], env, tmp_path)
        assert on_cpu_box.returncode == 2 and "has no NVIDIA GPU" in on_cpu_box.stderr
