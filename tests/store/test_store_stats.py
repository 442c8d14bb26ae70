"""`store.read_store_counts`: what ``GET /metrics`` reports of the store."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from store import StoreCounts, Target, append_event, claim_next_job, read_store_counts, record_attempt
from tests.support.store import Builders
from vocabulary.events import EventType
from vocabulary.verdict import Status


def test_counts_by_state_status_and_events(session: Session, build: Any) -> None:
    assert read_store_counts(session=session) == StoreCounts(jobs_by_state={}, attempts_by_status={}, events=0)
    first, _second = build.job(), build.job()
    claim_next_job(session=session, worker_id="w", target=Target.CPU, lease_seconds=60)  # the first: +1 event
    for i, status in enumerate((Status.PASS, Status.FAIL, Status.FAIL)):
        record_attempt(session=session, job_id=first.id, trajectory_id=None, tool="evaluate",
                       source=f"# {i}\n", parent_id=None,
                       verdict=Builders.verdict(status, correct=status is Status.PASS))
    append_event(session=session, job_id=first.id, type=EventType.PROGRESS, payload={})
    session.commit()
    counts = read_store_counts(session=session)
    assert counts.jobs_by_state == {"queued": 1, "running": 1}
    assert counts.attempts_by_status == {"pass": 1, "fail": 2}
    # queued + running + 3 attempts + progress for the first job, queued for the second.
    assert counts.events == 7
