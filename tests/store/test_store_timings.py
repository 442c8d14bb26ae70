"""`store.job_timings`: a job's attempts' stage seconds and kinds, read back from their verdicts,
and its queue wait; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from store import Job, NotFound, claim_job, job_timings, record_attempt
from tests.support.store import Builders
from vocabulary.builds import CompileResult
from vocabulary.stages import StageSeconds
from vocabulary.verdict import AttemptKind, ErrorKind, Stage, Status, Verdict


def _record(session: Session, job_id: int, verdict: Verdict, tool: str = "benchmark") -> None:
    record_attempt(session=session, job_id=job_id, trajectory_id=None, tool=tool,
                   source=f"# {verdict.status.value} {verdict.stage_seconds}\n", parent_id=None, verdict=verdict)


def test_a_jobs_attempts_come_back_with_their_seconds_and_kinds(session: Session, build: Any) -> None:
    job = build.job()
    other = build.job()
    session.flush()
    queued = job_timings(session=session, job_id=job.id)
    assert (queued.queue_wait_s, queued.attempts) == (None, ())
    claim_job(session=session, job_id=job.id, worker_id="w1", lease_seconds=60)
    # Claimed 4.5 s after it was created.
    session.execute(update(Job).where(Job.id == job.id).values(started_at=job.created_at + timedelta(seconds=4.5)))
    broken = Verdict(status=Status.ERROR, stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE,
                     message="compile failed", compile=CompileResult(ok=False, seconds=12.0),
                     stage_seconds=StageSeconds(header_build=30.0, compile=12.0))
    wrong = Builders.verdict(Status.FAIL, correct=False, stage=Stage.CORRECTNESS, median_ms=None).with_changes(
        stage_seconds=StageSeconds(reference_start=2.0, baselines=3.5, compile=20.0, load=0.4, correctness=1.2))
    fast = Builders.verdict(median_ms=1.0).with_changes(
        stage_seconds=StageSeconds(compile=18.0, load=0.3, correctness=1.1, timing=1.25))
    rejudged = Builders.verdict(median_ms=1.1).with_changes(
        stage_seconds=StageSeconds(reference_start=2.5, baselines=3.0, load=0.3, correctness=1.1, timing=1.5))
    old = Builders.verdict(median_ms=8.0)  # a verdict stored before stage seconds: none
    for verdict in (broken, wrong, fast):
        _record(session, job.id, verdict)
    _record(session, job.id, rejudged, tool="retime")
    _record(session, job.id, old)
    _record(session, other.id, fast)
    session.commit()

    timings = job_timings(session=session, job_id=job.id)
    assert timings.job_id == job.id and timings.queue_wait_s == pytest.approx(4.5)
    assert [(a.n, a.tool, a.kind) for a in timings.attempts] == [
        (1, "benchmark", AttemptKind.COMPILE_ERROR), (2, "benchmark", AttemptKind.WRONG),
        (3, "benchmark", AttemptKind.FAST), (4, "retime", AttemptKind.FAST), (5, "benchmark", AttemptKind.CORRECT)]
    assert [a.stage_seconds for a in timings.attempts] == [broken.stage_seconds, wrong.stage_seconds,
                                                           fast.stage_seconds, rejudged.stage_seconds, StageSeconds()]
    assert [a.lane_s for a in timings.attempts] == pytest.approx([0.0, 7.1, 2.65, 8.4, 0.0])
    assert len(job_timings(session=session, job_id=other.id).attempts) == 1
    with pytest.raises(NotFound):
        job_timings(session=session, job_id=job.id + 1000)
