"""``kernelloop optimize`` agrees with ``submit`` (issue 24, item 8), run as a script runs it: the
installed command, output piped.

Before: ``optimize`` had no ``--max-cost``, ``--wall-clock``, ``--max-tokens`` or ``--json``, and its
jobs stored ``budgets: {}`` while it enforced 400k tokens, $5 and an hour (the dashboard showed "no
limit"), and ``llm_model`` null ("LLM scripted (None)").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from store import get_job, make_engine, make_session_factory, session_scope
from tests.support.cli import KERNELLOOP_COMMAND, QUICK_TIMING_ENV, pythonpath
from tests.support.databases import sqlite_url_in

pytestmark = pytest.mark.slow


def _env(tmp_path: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "LINES") and (not k.startswith("KERNELLOOP_") or k.startswith("KERNELLOOP_TEST"))}
    env.update(PYTHONPATH=pythonpath(), HOME=str(tmp_path / "home"), KERNELLOOP_DATA_DIR=str(tmp_path / "data"),
               KERNELLOOP_CACHE_DIR=str(cache), KERNELLOOP_WARM_HEADERS="false", CUDA_VISIBLE_DEVICES="",
               **QUICK_TIMING_ENV)
    return env


def test_optimize_json_runs_under_the_budgets_it_stores(tmp_path: Path, harness_cache: Path) -> None:
    done = subprocess.run([str(KERNELLOOP_COMMAND), "optimize", "level1/softmax", "--llm", "scripted", "--target",
                           "cpu", "--json", "--turns", "8", "--max-tokens", "90000", "--max-cost", "1.5",
                           "--wall-clock", "1200"], cwd=tmp_path, env=_env(tmp_path, harness_cache),
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]  # every line of stdout is JSON
    job = lines[0]
    expected = {"turns": 8, "tool_calls": 30, "max_tokens": 90_000, "max_cost_usd": 1.5, "wall_clock_s": 1200.0,
                "target_speedup": None}
    assert job["budgets"] == expected and (job["llm_profile"], job["llm_model"]) == ("scripted", "scripted")
    events, final = lines[1:-1], lines[-1]
    assert {e["type"] for e in events} >= {"state", "attempt", "message"}
    assert final["type"] == "job" and final["data"]["state"] == "succeeded"
    best = final["data"]["best"]
    assert best["eager_ms"] > 0 and best["compile_ms"] is not None
    attempt = next(e["data"] for e in events if e["type"] == "attempt" and e["data"].get("median_ms"))
    assert attempt["eager_ms"] == pytest.approx(attempt["median_ms"] * attempt["speedup_vs_eager"])
    # The summary, in words, on stderr: how it compares, with the milliseconds.
    said = " ".join(done.stderr.split())
    assert f"best: attempt {best['n']}," in said and "ms) " in said and "vs torch.compile (" in said
    assert ("Nothing beat" in said) or ("It beats" in said)
    engine = make_engine(sqlite_url_in(tmp_path / "data"))
    try:
        with session_scope(make_session_factory(engine)) as session:
            stored = get_job(session=session, job_id=job["id"])
            assert stored.budgets == expected and stored.llm_model == "scripted"
    finally:
        engine.dispose()


def test_optimize_refuses_budgets_the_api_would_refuse(tmp_path: Path) -> None:
    refused = subprocess.run([str(KERNELLOOP_COMMAND), "optimize", "level1/softmax", "--target", "cpu",
                              "--turns", "1000"], cwd=tmp_path, env=_env(tmp_path, tmp_path / "cache"),
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stderr
    assert "less than or equal to 100" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was created
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
