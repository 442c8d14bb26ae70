"""On an H200 (`pytest -m gpu`): the README's main command on cuda, through the service's own path.

`kernelloop optimize` runs the scripted LLM's script of seed problem 1 as an agent job on the embedded
default: the job row in SQLite, claimed with a lease, run by `worker.runner.run_job` (the code a
Celery or embedded worker runs), every message, attempt and event stored as it happens. This test
reads the store afterwards. Besides torch and pytest it needs the service's packages (sqlalchemy,
alembic, pydantic, pydantic-settings, celery, typer, rich): on the device they travel as wheels.
Figures go to stdout (run with -s) and, when KERNELLOOP_GPU_REPORT is set, to that file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.gpu import report
from tests.support.paths import REPO

pytestmark = pytest.mark.gpu

SEED1 = "level2/conv_tanh_scale_bias_maxpool"


def test_optimize_seed1_cuda_through_the_store(tmp_path: Path) -> None:
    from sqlalchemy import select

    from store import Attempt, Job, Message, make_engine, make_session_factory, session_scope
    from worker.runner import RETIME_TOOL

    data_dir = tmp_path / "data"
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "KERNELLOOP_DATA_DIR": str(data_dir), "PYTHONPATH": pythonpath}
    if os.environ.get("KERNELLOOP_TEST_CACHE"):  # builds shared with the other GPU tests
        env["KERNELLOOP_CACHE_DIR"] = os.environ["KERNELLOOP_TEST_CACHE"]
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "cli.main", "optimize", SEED1, "--llm", "scripted", "--target", "cuda"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    wall_s = time.monotonic() - started
    print(run.stdout[-6000:], run.stderr[-3000:])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    factory = make_session_factory(make_engine(f"sqlite:///{data_dir / 'kernelloop.db'}"))
    with session_scope(factory) as session:
        job = session.scalars(select(Job)).one()
        attempts = list(session.scalars(select(Attempt).where(Attempt.job_id == job.id).order_by(Attempt.n)))
        messages = session.scalars(select(Message)).all()
        best = session.get(Attempt, job.best_attempt_id)
        rows = [{"n": a.n, "tool": a.tool, "status": a.status.value, "stage": a.stage, "median_ms": a.median_ms,
                 "speedup_vs_eager": a.speedup_vs_eager, "speedup_vs_compile": a.speedup_vs_compile,
                 "pct_of_sol": a.pct_of_sol, "compile_s": a.compile_s} for a in attempts]
        report({"test": "optimize_seed1_cuda_store", "wall_s": round(wall_s, 1), "job_state": job.state.value,
                 "messages": len(messages), "attempts": rows,
                 "best": None if best is None else {"n": best.n, "median_ms": best.median_ms,
                                                    "eager_ms": (best.verdict.get("baselines") or {}).get("eager_ms"),
                                                    "torch_compile_ms": (best.verdict.get("baselines") or {}).get(
                                                        "torch_compile_ms"),
                                                    "speedup_vs_eager": best.speedup_vs_eager,
                                                    "speedup_vs_compile": best.speedup_vs_compile,
                                                    "pct_of_sol": best.pct_of_sol}})
        assert job.state == "succeeded", (job.state, job.error)
        # The script's six tool calls, then the worker's re-judging of the fastest verified kernel
        # in a fresh process (`worker.runner`: a job's best comes from that `retime` attempt).
        assert [(a.tool, a.status.value) for a in attempts] == [
            ("compile", "error"), ("check_correctness", "fail"), ("check_correctness", "pass"),
            ("benchmark", "pass"), ("benchmark", "pass"), ("profile", "pass"), (RETIME_TOOL, "pass")]
        tool_calls = [a for a in attempts if a.tool != RETIME_TOOL]
        assert len(messages) >= 2 * len(tool_calls)  # each tool call: the assistant's turn and its result
        assert best is not None and best.tool == RETIME_TOOL and best.speedup_vs_eager > 1.2
        assert best.sha256 == attempts[4].sha256  # the fast kernel, re-judged


def test_replay_reproduces_the_jobs_speedups(tmp_path: Path) -> None:
    """submit → replay against ``kernelloop up --target cuda``: the best kernel's speedups, re-measured
    with fresh eager and torch.compile baselines, within 5 % of the stored ones (kernels ≥ 1 ms)."""
    from tests.support.cli import KERNELLOOP, api_env, kernelloop_up, run

    cache = Path(os.environ.get("KERNELLOOP_TEST_CACHE") or tmp_path / "cache")
    with kernelloop_up(tmp_path, cache, "cuda") as up:
        env = api_env(up.base_url, up.key, tmp_path / "home")
        submitted = run(["submit", SEED1, "--llm", "scripted", "--target", "cuda"], env, tmp_path, 900,
                        program=KERNELLOOP)
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:] + up.log_tail()
        job_id = int(submitted.stdout.splitlines()[0])
        started = time.monotonic()
        replayed = run(["replay", str(job_id), "--cache-dir", str(cache), "--json"], env, tmp_path, 900,
                       program=KERNELLOOP)
        replay_s = time.monotonic() - started
        assert replayed.returncode == 0, replayed.stdout[-3000:] + replayed.stderr[-3000:]
        print(replayed.stderr)
        import httpx

        stored = httpx.get(f"{up.base_url}/jobs/{job_id}/best", headers={"X-API-Key": up.key}).json()["attempt"][
            "verdict"]
    local = json.loads(replayed.stdout.strip().splitlines()[-1])
    figures = {
        name: {"stored": stored[name], "replayed": local[name], "ratio": local[name] / stored[name]}
        for name in ("speedup_vs_eager", "speedup_vs_compile")
    }
    for side in ("eager_ms", "torch_compile_ms"):
        figures[side] = {"stored": stored["baselines"][side], "replayed": local["baselines"][side]}
    figures["median_ms"] = {"stored": stored["timing"]["median_ms"], "replayed": local["timing"]["median_ms"]}
    report({"test": "replay_seed1_cuda", "job": job_id, "replay_s": round(replay_s, 1), **figures})
    assert "eager and torch.compile re-measured in this replay" in replayed.stderr
    assert stored["timing"]["median_ms"] >= 1.0
    for name in ("speedup_vs_eager", "speedup_vs_compile"):
        assert abs(figures[name]["ratio"] - 1) <= 0.05, figures
