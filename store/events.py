"""A job's event stream: what ``GET /jobs/{id}/events`` sends, resumable with ``Last-Event-ID``.

Event ids count from 1 per job. They are handed out by a single writer: `append_event` bumps
``jobs.last_event_id`` with one ``UPDATE … RETURNING``, which holds the job row's lock (the
database's write lock on SQLite) until the transaction commits. Hence an event with a lower id
is always committed before one with a higher id of the same job, and a reader that has seen id
``k`` and asks for ``id > k`` never misses one. A global autoincrement id would not give that:
two transactions may commit in the opposite order to the ids they drew, and a streaming client
would skip the slower one for good.

The store appends events itself for what it changes (every job state move, a cancel request,
every recorded attempt), in the same transaction as the change; other modules add their own
types (progress, messages) with `append_event`.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from store._sql import bump_counter
from store.models import Job, JobEvent, utcnow
from store.pagination import DEFAULT_PAGE_SIZE, check_limit

__all__ = ["EventType", "append_event", "events_after"]


class EventType(StrEnum):
    """The events the store itself appends. Payloads:

    - ``state``: ``{"state", "previous", "reason"?, "error"?, "worker_id"?}``
    - ``cancel_requested``: ``{}``
    - ``attempt``: ``{"n", "attempt_id", "trajectory_id", "tool", "status", "stage", "correct",
      "median_ms", "speedup_vs_eager", "speedup_vs_compile", "pct_of_sol", "best"}``
    """

    STATE = "state"
    CANCEL_REQUESTED = "cancel_requested"
    ATTEMPT = "attempt"


def append_event(
    *,
    session: Session,
    job_id: int,
    type: str,  # the column's name; an EventType or any short string
    payload: dict[str, Any],
    now: datetime | None = None,
) -> JobEvent:
    """Append one event to a job's stream; its id is the job's previous last id plus one.

    Raises:
        NotFound: no job with that id.
    """
    event_id = bump_counter(session, Job, job_id, Job.last_event_id)
    event = JobEvent(
        job_id=job_id,
        id=event_id,
        type=str(getattr(type, "value", type)),
        payload=payload,
        created_at=now or utcnow(),
    )
    session.add(event)
    session.flush()
    return event


def events_after(
    *, session: Session, job_id: int, after_id: int = 0, limit: int = DEFAULT_PAGE_SIZE
) -> list[JobEvent]:
    """A job's events with ``id > after_id``, oldest first, at most ``limit`` of them.

    ``after_id`` is the id of the last event the reader has (``Last-Event-ID``); 0 for all.
    """
    check_limit(limit)
    stmt = (
        select(JobEvent)
        .where(JobEvent.job_id == job_id, JobEvent.id > after_id)
        .order_by(JobEvent.id)
        .limit(limit)
    )
    return list(session.scalars(stmt))
