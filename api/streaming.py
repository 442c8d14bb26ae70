"""Server-Sent Events for a job: the store's event log, polled and written as an SSE stream.

Wire format, one block per stored event::

    id: 7
    event: attempt
    data: {"n": 3, "status": "pass", ...}

``id`` is the job's own event counter (1, 2, 3 … with no gaps, see `store.events`), so a client
that reconnects with ``Last-Event-ID: 7`` (browsers do it by themselves) or ``?after=7`` gets
exactly the events after 7. A comment line (``: keep-alive``) goes out when nothing else has
for a while, so proxies keep the connection open. When the job has reached a terminal state and
every event has been sent, a last ``event: end`` (without an id, so it does not move the
client's position) says so and the stream closes: close the ``EventSource`` on it, or it will
reconnect.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.metrics import RequestMetrics
from store import JobEvent, JobState, NotFound, events_after, get_job, session_scope

__all__ = ["END_EVENT", "StreamOptions", "format_comment", "format_event", "job_event_stream"]

END_EVENT = "end"


@dataclass(frozen=True)
class StreamOptions:
    """How event streams poll and pace themselves."""

    #: How often the store is asked for new events: the worst-case lag an event adds (the load
    #: target is p99 under 1 s), against one small indexed query per watcher per interval.
    poll_interval_s: float = 0.2
    #: A comment after this much silence: below the 30-60 s idle timeouts of common proxies.
    keepalive_s: float = 15.0
    #: Events read per query; a stream that finds a full batch reads again without waiting.
    batch: int = 200
    #: A stream closes after this long even if the job runs on (``None``: never), so long-lived
    #: connections get rebalanced; clients resume with ``Last-Event-ID`` as after any drop.
    max_duration_s: float | None = 1800.0
    #: The reconnection delay suggested to clients (the SSE ``retry:`` field), in milliseconds.
    retry_ms: int = 1000


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def format_event(event_id: int, event_type: str, payload: Any) -> str:
    data = json.dumps(payload, separators=(",", ":"), default=str)  # JSON escapes newlines: one line
    return f"id: {event_id}\nevent: {_one_line(event_type)}\ndata: {data}\n\n"


def format_comment(text: str) -> str:
    return f": {_one_line(text)}\n\n"


def _poll(factory: sessionmaker[Session], job_id: int, after: int, batch: int) -> tuple[JobState, Sequence[JobEvent]]:
    # The state is read before the events: if it is terminal, the event that made it so (written
    # in the same transaction) is already committed and this read returns it.
    with session_scope(factory) as session:
        state = get_job(session=session, job_id=job_id).state
        return state, events_after(session=session, job_id=job_id, after_id=after, limit=batch)


async def job_event_stream(
    *,
    factory: sessionmaker[Session],
    job_id: int,
    after: int,
    options: StreamOptions,
    metrics: RequestMetrics,
    is_disconnected: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """The SSE text of a job's events after ``after``, until the job is over (see the module doc).

    ``is_disconnected`` is asked before every poll, so a client that went away stops the polling
    even on servers that only notice a dead connection when writing to it.
    """
    metrics.stream_opened()
    try:
        yield f"retry: {options.retry_ms}\n\n"
        started = last_write = time.monotonic()
        while not await is_disconnected():
            try:
                state, events = await run_in_threadpool(_poll, factory, job_id, after, options.batch)
            except NotFound:
                yield format_comment(f"job {job_id} was deleted")
                yield f"event: {END_EVENT}\ndata: {json.dumps({'state': None, 'deleted': True})}\n\n"
                return
            for event in events:
                yield format_event(event.id, event.type, event.payload)
                after = event.id
            now = time.monotonic()
            if events:
                last_write = now
            if len(events) == options.batch:
                continue  # more are waiting
            if state.is_terminal:
                yield f"event: {END_EVENT}\ndata: {json.dumps({'state': state.value, 'last_event_id': after})}\n\n"
                return
            if options.max_duration_s is not None and now - started >= options.max_duration_s:
                return
            if now - last_write >= options.keepalive_s:
                yield format_comment("keep-alive")
                last_write = now
            await anyio.sleep(options.poll_interval_s)
    finally:
        metrics.stream_closed()
