"""Time to verdict in ``kernelloop bench`` reports (bench.md and bench.json): p50 and p95 per
stage over the bench's attempts (its jobs' queue waits first), lane seconds per attempt kind and
verdicts per lane-hour; from the jobs' ``/timings`` (the test plays the worker and stores the
attempts' verdicts) and, with ``--candidates``, from the verdicts judged locally (scripted here)."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from cli.client.bench import SuiteEntry
from cli.client.bench_candidates import CandidateRun, write_report
from store import Job, JobState, claim_next_job, get_job, session_scope
from tests.support.cli import client_env, start
from tests.support.dashboard import WORKER_ID, Service, add_attempt, finish, verdict
from vocabulary.evaluation import Target
from vocabulary.stages import StageSeconds
from vocabulary.verdict import Stage, Status, Verdict

pytestmark = pytest.mark.timeout(180)


def _claim(service: Service, count: int, *, waited_s: float) -> list[int]:
    """Claim the bench's jobs as a worker does, each ``waited_s`` after its creation."""
    claimed: list[int] = []
    deadline = time.monotonic() + 60
    while len(claimed) < count:
        assert time.monotonic() < deadline, f"only {len(claimed)} of {count} jobs were queued"
        # Polls as the embedded worker does: the pause outside the transaction, or this loop would
        # hold SQLite's write lock nearly all the time and starve the API's inserts of the jobs.
        with session_scope(service.factory) as session:
            job = claim_next_job(session=session, worker_id=WORKER_ID, target=Target.CPU, lease_seconds=600)
            if job is not None:
                claimed.append(job.id)
                created = get_job(session=session, job_id=job.id).created_at
                session.execute(update(Job).where(Job.id == job.id)
                                .values(started_at=created + timedelta(seconds=waited_s * len(claimed))))
        if job is None:
            time.sleep(0.1)
    return claimed


def test_a_bench_reports_the_time_to_verdict_of_its_jobs_attempts(service: Service, tmp_path: Path) -> None:
    suite = tmp_path / "suite.txt"
    suite.write_text("level1/softmax\nlevel1/gelu_tanh\n")
    out_dir = tmp_path / "report"
    process = start(["bench", str(suite), "--target", "cpu", "--out", str(out_dir), "--poll", "0.2"],
                    client_env(service, tmp_path), tmp_path)
    softmax, gelu = _claim(service, 2, waited_s=2.0)  # queue waits 2 s and 4 s
    cpu = {"device": "cpu", "target": "cpu"}
    # softmax: the cold first attempt is wrong (reference start and baselines on its lane), then a fast one.
    add_attempt(service.factory, softmax, verdict(Status.FAIL, **cpu, stage_seconds=StageSeconds(
        header_build=25.0, reference_start=2.0, baselines=4.0, compile=30.0, load=0.5, correctness=1.5)))
    add_attempt(service.factory, softmax, verdict(median_ms=2.0, **cpu, stage_seconds=StageSeconds(
        compile=20.0, load=0.5, correctness=1.5, timing=2.0)))
    finish(service.factory, softmax)
    # gelu: a compile error, then a correct kernel slower than eager.
    add_attempt(service.factory, gelu, verdict(Status.ERROR, depth="compile", **cpu,
                                               stage_seconds=StageSeconds(compile=10.0)))
    add_attempt(service.factory, gelu, verdict(median_ms=8.0, **cpu, stage_seconds=StageSeconds(
        reference_start=1.0, baselines=3.0, compile=40.0, load=0.5, correctness=1.5, timing=3.0)))
    finish(service.factory, gelu, JobState.SUCCEEDED)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr

    # Lane: 8 + 4 + 0 + 9 = 21 s for four verdicts: 686 an hour.
    table = json.loads((out_dir / "bench.json").read_text())["time_to_verdict"]
    assert table["attempts"] == 4 and table["lane_s"] == 21.0 and table["verdicts_per_lane_hour"] == 685.7
    stages = {row["stage"]: row for row in table["stages"]}
    assert stages["queue_wait"] == {"stage": "queue_wait", "n": 2, "p50_s": 3.0, "p95_s": 3.9, "total_s": 6.0}
    assert (stages["compile"]["n"], stages["compile"]["p50_s"], stages["compile"]["p95_s"]) == (4, 25.0, 38.5)
    assert stages["timing"]["n"] == 2 and stages["header_build"]["n"] == 1
    assert {k["kind"]: k["attempts"] for k in table["kinds"]} == {"compile_error": 1, "wrong": 1, "correct": 1,
                                                                   "fast": 1, "all": 4}
    markdown = (out_dir / "bench.md").read_text()
    assert "## Time to verdict" in markdown and "**686 verdicts per lane-hour**" in markdown
    assert "| queue wait | 2 | 3.00 | 3.90 | 6.00 |" in markdown
    assert "| compile | 4 | 25.0 | 38.5 | 100 |" in markdown
    assert markdown.index("## Time to verdict") < markdown.index("## Provenance")
    assert "686 verdicts per lane-hour (4 attempts, 21.0 s of lane time)" in stdout


def _judged(status: Status, seconds: StageSeconds, median_ms: float | None = None) -> Verdict:
    figures = {"median_ms": median_ms} if median_ms is not None else {}
    stage = {Status.ERROR: Stage.COMPILE, Status.FAIL: Stage.CORRECTNESS}.get(status)
    extra = {"depth": "compile"} if status is Status.ERROR else {}
    return Verdict.from_dict(verdict(status, **figures, stage=stage, device="cpu", target="cpu",
                                     stage_seconds=seconds, **extra))


def test_a_candidates_bench_reports_the_time_to_verdict_of_its_verdicts_rejudgings_included(tmp_path: Path) -> None:
    def run(name: str, final: Verdict | None, first: Verdict | None = None) -> CandidateRun:
        return CandidateRun(SuiteEntry(name, {"problem_id": name}), tmp_path / f"{name}.py", final,
                            first is not None, first)

    fast_first = _judged(Status.PASS, StageSeconds(reference_start=3.0, baselines=5.0, compile=30.0, load=0.5,
                                                   correctness=1.0, timing=1.5), median_ms=2.0)
    fast_again = _judged(Status.PASS, StageSeconds(reference_start=3.0, baselines=1.0, load=0.5, correctness=1.0,
                                                   timing=1.5), median_ms=2.1)
    runs = [run("level1/a", fast_again, fast_first),
            run("level1/b", _judged(Status.FAIL, StageSeconds(reference_start=3.0, baselines=4.0, compile=25.0,
                                                              load=0.5, correctness=2.5))),
            run("level1/c", _judged(Status.ERROR, StageSeconds(compile=12.0))),
            run("level1/d", None)]  # no candidate file: no verdict
    write_report(runs, Target.CPU, tmp_path / "out", suite=tmp_path / "suite.txt", candidates_dir=tmp_path)

    table = json.loads((tmp_path / "out" / "bench.json").read_text())["time_to_verdict"]
    # 11 + 7 + 10 + 0 s of lane for four verdicts (the re-judging counts: it used the lane too).
    assert table["attempts"] == 4 and table["lane_s"] == 28.0
    assert table["verdicts_per_lane_hour"] == pytest.approx(4 * 3600 / 28.0, abs=0.05)
    assert {k["kind"]: (k["attempts"], k["lane_s"]) for k in table["kinds"]} == {
        "compile_error": (1, 0.0), "wrong": (1, 10.0), "fast": (2, 18.0), "all": (4, 28.0)}
    assert [row["stage"] for row in table["stages"]] == ["reference_start", "baselines", "compile", "load",
                                                         "correctness", "timing"]
    markdown = (tmp_path / "out" / "bench.md").read_text()
    assert "**514 verdicts per lane-hour**" in markdown
    assert "| reference start | 3 | 3.00 | 3.00 | 9.00 |" in markdown
