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

Polling is shared: one `EventHub` per app reads the heads of every watched job (newest event
id, state) in one query per ``poll_interval_s`` and wakes the streams whose job has news; only a
woken stream reads its events. Idle streams cost no query of their own, so the database load
stays one small query per interval however many clients watch (the load run in benchmarks/ has
the figures: per-stream polling spent most of the API's CPU with 50 watchers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.metrics import RequestMetrics
from store import JobEvent, JobHead, JobState, NotFound, events_after, get_job, job_heads, session_scope
from vocabulary.events import EventType

__all__ = ["EventHub", "StreamOptions", "format_comment", "format_event", "job_event_stream"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamOptions:
    """How event streams poll and pace themselves."""

    #: How often the store is asked which watched jobs have new events (one query for all the
    #: app's streams, see `EventHub`): the worst-case lag an event adds (the load target is p99
    #: under 1 s). A stream also looks at its connection this often.
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


def _heads(factory: sessionmaker[Session], job_ids: Collection[int]) -> dict[int, JobHead]:
    with session_scope(factory) as session:
        return job_heads(session=session, job_ids=job_ids)


class _Watch:
    """One stream's registration with the hub: its job, what it has sent, and a wake-up flag."""

    def __init__(self, job_id: int, after: int) -> None:
        self.job_id = job_id
        #: The last event id the stream has sent; the hub wakes it for anything newer.
        self.after = after
        self._news = asyncio.Event()

    def wake(self) -> None:
        self._news.set()

    def take(self) -> bool:
        """Whether the hub woke this stream since the last call (and reset the flag)."""
        woken = self._news.is_set()
        self._news.clear()
        return woken

    async def wait(self, timeout: float) -> None:
        """Until the hub wakes this stream, or ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._news.wait(), timeout)


class EventHub:
    """Wakes an app's open streams when their job has news, from one query per interval for all.

    The heads (`store.job_heads`) of every watched job are read together every
    ``poll_interval_s`` while at least one stream is open (a task that starts with the first
    stream and ends with the last); a stream is woken when its job's newest event is past what
    it sent, when the job is over, or when the job is gone. The events themselves are still
    read by the stream (`store.events_after`), so order and completeness are the store's.
    """

    def __init__(self, factory: sessionmaker[Session], *, poll_interval_s: float) -> None:
        if poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be positive, got {poll_interval_s}")
        self._factory = factory
        self._interval = poll_interval_s
        self._watches: set[_Watch] = set()
        self._task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def watch(self, job_id: int, after: int) -> Iterator[_Watch]:
        """Register a stream of ``job_id`` that has sent up to ``after`` (call from the event loop)."""
        watch = _Watch(job_id, after)
        self._watches.add(watch)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sse-event-hub")
        try:
            yield watch
        finally:
            self._watches.discard(watch)

    async def _run(self) -> None:
        while self._watches:
            try:
                heads = await run_in_threadpool(_heads, self._factory, {w.job_id for w in self._watches})
            except Exception:  # the database is unreachable: streams wait (keep-alives go on)
                log.exception("event hub: reading the jobs' heads failed")
            else:
                for watch in list(self._watches):
                    head = heads.get(watch.job_id)
                    if head is None or head.last_event_id > watch.after or head.state.is_terminal:
                        watch.wake()
            await asyncio.sleep(self._interval)

    async def aclose(self) -> None:
        """Stop polling (the app is shutting down)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _poll(factory: sessionmaker[Session], job_id: int, after: int, batch: int) -> tuple[JobState, Sequence[JobEvent]]:
    # The state is read before the events: if it is terminal, the event that made it so (written
    # in the same transaction) is already committed and this read returns it.
    with session_scope(factory) as session:
        state = get_job(session=session, job_id=job_id).state
        return state, events_after(session=session, job_id=job_id, after_id=after, limit=batch)


async def job_event_stream(
    *,
    factory: sessionmaker[Session],
    hub: EventHub,
    job_id: int,
    after: int,
    options: StreamOptions,
    metrics: RequestMetrics,
    is_disconnected: Callable[[], Awaitable[bool]],
) -> AsyncIterator[str]:
    """The SSE text of a job's events after ``after``, until the job is over (see the module doc).

    The events are read at once (the history), then whenever ``hub`` says the job has news.
    ``is_disconnected`` is asked every ``poll_interval_s``, so a client that went away ends the
    stream even on servers that only notice a dead connection when writing to it.
    """
    metrics.stream_opened()
    try:
        with hub.watch(job_id, after) as watch:
            yield f"retry: {options.retry_ms}\n\n"
            started = last_write = time.monotonic()
            due = True  # the history, before any news
            while not await is_disconnected():
                if watch.take() or due:
                    try:
                        state, events = await run_in_threadpool(_poll, factory, job_id, after, options.batch)
                    except NotFound:
                        yield format_comment(f"job {job_id} was deleted")
                        yield f"event: {EventType.END}\ndata: {json.dumps({'state': None, 'deleted': True})}\n\n"
                        return
                    for event in events:
                        yield format_event(event.id, event.type, event.payload)
                        after = event.id
                    watch.after = after
                    if events:
                        last_write = time.monotonic()
                    due = len(events) == options.batch  # more are waiting
                    if due:
                        continue
                    if state.is_terminal:
                        end = {"state": state.value, "last_event_id": after}
                        yield f"event: {EventType.END}\ndata: {json.dumps(end)}\n\n"
                        return
                now = time.monotonic()
                if options.max_duration_s is not None and now - started >= options.max_duration_s:
                    return
                if now - last_write >= options.keepalive_s:
                    yield format_comment("keep-alive")
                    last_write = now
                await watch.wait(options.poll_interval_s)
    finally:
        metrics.stream_closed()
