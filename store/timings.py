"""Where a job's evaluation time went: each attempt's stage seconds and kind, and the job's queue
wait (read-only; the time-to-verdict table is drawn from these by `display.timings`).

The seconds live in each attempt's verdict JSON (``stage_seconds``, `vocabulary.stages.StageSeconds`),
so the verdicts are read back whole (not the sources) and classified by the one rule,
`vocabulary.verdict.attempt_kind`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from store.jobs import get_job
from store.models import Attempt
from vocabulary.stages import StageSeconds
from vocabulary.verdict import AttemptKind, Verdict, attempt_kind
from vocabulary.wire import WireError

__all__ = ["AttemptTiming", "JobTimings", "job_timings"]

#: Attempts read at most (a job past this is unusual; the dashboard shows as many).
MAX_TIMED_ATTEMPTS = 2000


@dataclass(frozen=True)
class AttemptTiming:
    """One attempt's seconds: by stage, and on the device lane."""

    n: int
    tool: str
    kind: AttemptKind
    stage_seconds: StageSeconds
    created_at: datetime

    @property
    def lane_s(self) -> float:
        return self.stage_seconds.lane


@dataclass(frozen=True)
class JobTimings:
    """A job's attempts' seconds, and how long it waited for a worker."""

    job_id: int
    #: Created → claimed (the latest claim after a re-queue); None while queued.
    queue_wait_s: float | None
    attempts: tuple[AttemptTiming, ...]


def job_timings(*, session: Session, job_id: int, limit: int = MAX_TIMED_ATTEMPTS) -> JobTimings:
    """The job's attempts in order with their stage seconds and kind (verdicts that no longer
    parse are left out), and its queue wait.

    Raises:
        NotFound: no such job.
    """
    job = get_job(session=session, job_id=job_id)
    queue_wait = None
    if job.started_at is not None and job.created_at is not None:
        queue_wait = max(0.0, (job.started_at - job.created_at).total_seconds())
    rows = session.execute(
        select(Attempt.n, Attempt.tool, Attempt.verdict, Attempt.created_at)
        .where(Attempt.job_id == job_id).order_by(Attempt.n).limit(limit)
    )
    attempts = []
    for n, tool, stored, created_at in rows:
        try:
            verdict = Verdict.from_dict(stored)
        except (WireError, ValueError):
            continue
        attempts.append(AttemptTiming(n=n, tool=tool, kind=attempt_kind(verdict),
                                      stage_seconds=verdict.stage_seconds, created_at=created_at))
    return JobTimings(job_id=job_id, queue_wait_s=queue_wait, attempts=tuple(attempts))
