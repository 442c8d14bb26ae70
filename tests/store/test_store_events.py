"""Job events: ids counted per job by a single writer, resumable reads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store import (
    JobHead,
    JobState,
    NotFound,
    Target,
    append_event,
    cancel_job,
    create_job,
    events_after,
    get_job,
    get_or_create_problem,
    job_heads,
    record_attempt,
    session_scope,
)
from vocabulary.events import AttemptPayload, EventType, StatePayload, parse_payload
from vocabulary.figures import AttemptFigures


def test_ids_count_per_job_and_resume(session: Session, build: Any) -> None:
    first, second = build.job(), build.job()  # each already has its "queued" event, id 1
    for i in range(5):
        append_event(session=session, job_id=first.id, type=EventType.PROGRESS, payload={"i": i})
    append_event(session=session, job_id=second.id, type=EventType.STATE, payload={"state": "x"})
    session.commit()

    events = events_after(session=session, job_id=first.id)
    assert [e.id for e in events] == [1, 2, 3, 4, 5, 6]
    assert [e.type for e in events] == ["state", *["progress"] * 5]
    assert [e.payload.get("i") for e in events[1:]] == [0, 1, 2, 3, 4]
    assert [e.id for e in events_after(session=session, job_id=second.id)] == [1, 2]
    assert get_job(session=session, job_id=first.id).last_event_id == 6

    # Resume after the last id seen, in pages.
    page = events_after(session=session, job_id=first.id, after_id=2, limit=2)
    assert [e.id for e in page] == [3, 4]
    page = events_after(session=session, job_id=first.id, after_id=page[-1].id, limit=2)
    assert [e.id for e in page] == [5, 6]
    assert events_after(session=session, job_id=first.id, after_id=6) == []


def test_append_to_a_missing_job_raises(session: Session) -> None:
    with pytest.raises(NotFound):
        append_event(session=session, job_id=12345, type=EventType.PROGRESS, payload={})


def test_concurrent_writers_get_dense_distinct_ids(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as session:
        problem = get_or_create_problem(session=session, source="class Model: ...", declarations={})
        job_id = create_job(session=session, problem_id=problem.id, target=Target.CPU).id

    writers, each = 3, 5
    barrier = threading.Barrier(writers)

    def write(index: int) -> list[int]:
        barrier.wait()
        ids = []
        for i in range(each):
            with session_scope(factory) as session:
                payload = {"w": index, "i": i}
                event = append_event(session=session, job_id=job_id, type=EventType.PROGRESS, payload=payload)
                ids.append(event.id)
        return ids

    with ThreadPoolExecutor(max_workers=writers) as pool:
        got = [i for ids in pool.map(write, range(writers)) for i in ids]

    assert sorted(got) == list(range(2, 2 + writers * each))
    with session_scope(factory) as session:
        stored = events_after(session=session, job_id=job_id, limit=100)
        assert [e.id for e in stored] == list(range(1, 2 + writers * each))
        # Each writer's own events keep its order.
        for index in range(writers):
            mine = [e.payload["i"] for e in stored if e.payload.get("w") == index]
            assert mine == list(range(each))


def test_job_heads_read_many_streams_at_once(session: Session, build: Any) -> None:
    first, second, gone = build.job(), build.job(), 424242
    for i in range(3):
        append_event(session=session, job_id=first.id, type=EventType.PROGRESS, payload={"i": i})
    cancel_job(session=session, job_id=second.id)
    session.commit()
    heads = job_heads(session=session, job_ids=[first.id, second.id, gone, first.id])
    assert heads == {
        first.id: JobHead(last_event_id=4, state=JobState.QUEUED),
        second.id: JobHead(last_event_id=2, state=JobState.CANCELLED),
    }
    assert job_heads(session=session, job_ids=[]) == {}


def test_the_store_s_own_events_read_back_typed(session: Session, build: Any) -> None:
    job = build.job()
    verdict = build.verdict(median_ms=2.0)
    attempt = record_attempt(session=session, job_id=job.id, trajectory_id=None, tool="benchmark", source="s",
                             parent_id=None, verdict=verdict)
    session.commit()
    parsed = [parse_payload(e.type, e.payload) for e in events_after(session=session, job_id=job.id)]
    assert parsed[0] == StatePayload(state="queued")
    event = parsed[-1]
    assert isinstance(event, AttemptPayload) and event.best and event.n == attempt.n
    # One shape of the figures: the columns, the event and the verdict they came from agree.
    assert attempt.figures == AttemptFigures.of(verdict) == AttemptFigures.from_dict(event.to_dict())
