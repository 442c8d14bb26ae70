"""``bench``: one job per problem of a suite, the KernelBench table as Markdown and JSON. The test
plays the worker: it claims the jobs the command queued, stores attempts and finishes them."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from problems import load_problem
from store import JobState, Target, claim_next_job, session_scope
from tests.support.cli import client_env, start
from tests.support.dashboard import WORKER_ID, Service, add_attempt, finish, verdict
from vocabulary.verdict import Status

pytestmark = pytest.mark.timeout(180)


def _claim_all(service: Service, count: int, timeout: float = 60) -> list[int]:
    claimed: list[int] = []
    deadline = time.monotonic() + timeout
    while len(claimed) < count:
        assert time.monotonic() < deadline, f"only {len(claimed)} of {count} jobs were queued"
        with session_scope(service.factory) as session:
            job = claim_next_job(session=session, worker_id=WORKER_ID, target=Target.CPU, lease_seconds=600)
            if job is not None:
                claimed.append(job.id)
                continue
        time.sleep(0.1)
    return claimed


def test_bench_on_a_two_problem_suite(service: Service, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-used")  # the openai profile's key, in the API's process
    posted = tmp_path / "problems" / "my_gelu.py"
    posted.parent.mkdir()
    posted.write_text(load_problem("level1/gelu_tanh").source + "# a posted copy\n")
    suite = tmp_path / "suite.txt"
    suite.write_text("# two problems: a bundled id and a file beside the suite\nlevel1/softmax\nproblems/my_gelu.py\n")
    out_dir = tmp_path / "report"
    # A posted problem has no script for the scripted LLM: the suite runs under another profile (jobs are faked here).
    process = start(["bench", str(suite), "--target", "cpu", "--llm", "openai", "--out", str(out_dir), "--poll", "0.2"],
                    client_env(service, tmp_path), tmp_path)
    softmax, gelu = _claim_all(service, 2)
    # softmax: a failure, then a kernel 1.6x faster than eager (torch.compile at 1.25x: 2.5 ms vs 2.0 ms).
    add_attempt(service.factory, softmax, verdict(Status.FAIL, device="cpu", target="cpu"), tokens=4000,
                cost_usd=0.1)
    add_attempt(service.factory, softmax, verdict(median_ms=2.5, eager_ms=4.0, compile_ms=2.0, device="cpu",
                                                  target="cpu"), tokens=8000, cost_usd=0.2)
    finish(service.factory, softmax)
    # gelu: nothing correct.
    add_attempt(service.factory, gelu, verdict(Status.ERROR, device="cpu", target="cpu"), tokens=2000, cost_usd=0.05)
    finish(service.factory, gelu, JobState.SUCCEEDED)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr

    report = json.loads((out_dir / "bench.json").read_text())
    summary = report["summary"]
    assert summary["problems"] == 2
    assert summary["fast_p"] == {"0": 0.5, "1": 0.5, "1.5": 0.5, "2": 0.0}
    assert summary["geomean_speedup_vs_eager"] == pytest.approx(1.6)
    assert summary["geomean_speedup_vs_compile"] == pytest.approx(0.8)
    assert summary["tokens"] == (4000 + 8000 + 2000) * 5 // 4 and summary["cost_usd"] == pytest.approx(0.35)
    assert [p["problem"] for p in report["problems"]] == ["level1/softmax", "my_gelu"]
    assert [p["correct"] for p in report["problems"]] == [True, False]

    markdown = (out_dir / "bench.md").read_text()
    assert "| fast_0 | fast_1 | fast_1.5 | fast_2 |" in markdown
    assert "| 0.50 | 0.50 | 0.50 | 0.00 | 1.60× | 0.80× | 2 |" in markdown
    assert "| level1/softmax |" in markdown and "| my_gelu |" in markdown
    assert "fast_0 = 0.50" in stdout and "fast_2 = 0.00" in stdout
