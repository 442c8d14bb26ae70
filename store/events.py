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
types (progress, messages) with `append_event`; every type is a `vocabulary.EventType`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from store._sql import bump_counter
from store.models import Job, JobEvent, utcnow
from store.pagination import DEFAULT_PAGE_SIZE, check_limit
from store.states import JobState
from vocabulary.events import EventType
from vocabulary.wire import JsonObject

__all__ = ["JobHead", "append_event", "events_after", "job_heads"]

#: Ids per ``IN (…)`` list in `job_heads` (SQLite allows 32766 bound parameters; stay far below).
_HEADS_CHUNK = 500


def append_event(
    *,
    session: Session,
    job_id: int,
    type: EventType,  # the column's name
    payload: JsonObject,
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
        type=type.value,
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


@dataclass(frozen=True)
class JobHead:
    """Where a job's stream stands: its newest event id and its state, read together."""

    last_event_id: int
    state: JobState


def job_heads(*, session: Session, job_ids: Collection[int]) -> dict[int, JobHead]:
    """The heads of many jobs' streams in one query (per 500 ids); a missing id is a deleted job.

    ``last_event_id`` and an event are written in one transaction, so a reader that sees
    ``last_event_id == k`` finds events ``1..k`` with `events_after`; and a terminal state is
    written with its own event, so a terminal head with ``last_event_id == k`` means that
    nothing comes after ``k``.
    """
    ids = sorted(set(job_ids))
    heads: dict[int, JobHead] = {}
    for start in range(0, len(ids), _HEADS_CHUNK):
        chunk = ids[start : start + _HEADS_CHUNK]
        rows = session.execute(select(Job.id, Job.last_event_id, Job.state).where(Job.id.in_(chunk)))
        heads.update({job_id: JobHead(last_event_id=last, state=state) for job_id, last, state in rows})
    return heads
