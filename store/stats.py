"""Aggregate counts of the store, for monitoring (``GET /metrics``): read-only, a few ``GROUP BY``s."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.models import Attempt, Job

__all__ = ["StoreCounts", "read_store_counts"]


@dataclass(frozen=True)
class StoreCounts:
    """Rows of the store, counted at one moment."""

    #: Jobs by state value (``queued``, ``running``, …); states without jobs are absent.
    jobs_by_state: dict[str, int]
    #: Attempts by verdict status value (``pass``, ``fail``, …); statuses without attempts are absent.
    attempts_by_status: dict[str, int]
    #: Events appended to the jobs that still exist (each job's newest event id is its count).
    events: int


def read_store_counts(*, session: Session) -> StoreCounts:
    """Jobs by state, attempts by status, and the events of existing jobs (three small queries)."""
    jobs = {
        str(state.value): int(n) for state, n in session.execute(select(Job.state, func.count()).group_by(Job.state))
    }
    attempts = {
        str(status.value): int(n)
        for status, n in session.execute(select(Attempt.status, func.count()).group_by(Attempt.status))
    }
    events = session.scalar(select(func.coalesce(func.sum(Job.last_event_id), 0))) or 0
    return StoreCounts(jobs_by_state=jobs, attempts_by_status=attempts, events=int(events))
