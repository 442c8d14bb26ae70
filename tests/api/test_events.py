"""``GET /jobs/{id}/events``: Server-Sent Events in order, with ids, resumable, ending with the job."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from api import StreamOptions, create_app
from store import JobState, Target, claim_next_job, finish_job, record_attempt, session_scope
from tests.support.api import CANDIDATE_SOURCE, Key, RecordingDispatcher, job_body, serve, verdict_dict
from vocabulary.verdict import Status, Verdict


@dataclass
class Stream:
    """An SSE response, parsed: events (with their ids), comments and the ``retry`` hint."""

    events: list[dict[str, Any]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    retry: int | None = None

    @property
    def ids(self) -> list[int]:
        return [int(e["id"]) for e in self.events if "id" in e]

    @property
    def types(self) -> list[str]:
        return [e["event"] for e in self.events]


def parse_sse(text: str) -> Stream:
    stream = Stream()
    for block in text.split("\n\n"):
        event: dict[str, Any] = {}
        for line in block.split("\n"):
            if not line:
                continue
            if line.startswith(":"):
                stream.comments.append(line[1:].strip())
                continue
            name, _, value = line.partition(": ")
            if name == "retry":
                stream.retry = int(value)
            elif name == "data":
                event["data"] = json.loads(value)
            else:
                event[name] = value
        if event:
            stream.events.append(event)
    return stream


def read_stream(client: TestClient, path: str, key: Key, **headers: str) -> Stream:
    with client.stream("GET", path, headers={**key.headers, **headers}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        return parse_sse("".join(response.iter_text()))


def _run_job(factory: sessionmaker[Session], job_id: int, *, pause_s: float = 0.0) -> None:
    """What a worker writes: claim (running), two attempts, success."""
    with session_scope(factory) as session:
        claimed = claim_next_job(session=session, worker_id="w1", target=Target.CPU, lease_seconds=60)
        assert claimed is not None and claimed.id == job_id
    for i, status in enumerate((Status.FAIL, Status.PASS)):
        time.sleep(pause_s)
        with session_scope(factory) as session:
            record_attempt(
                session=session,
                job_id=job_id,
                trajectory_id=None,
                tool="evaluate",
                source=f"{CANDIDATE_SOURCE}# {i}\n",
                parent_id=None,
                verdict=Verdict.from_dict(verdict_dict(status, correct=status is Status.PASS)),
            )
    time.sleep(pause_s)
    with session_scope(factory) as session:
        finish_job(session=session, job_id=job_id, worker_id="w1", state=JobState.SUCCEEDED)


def _finished_job(client: TestClient, key: Key, factory: sessionmaker[Session]) -> int:
    job_id = client.post("/jobs", json=job_body(), headers=key.headers).json()["id"]
    _run_job(factory, job_id)
    return job_id


def test_events_stream_in_order_with_ids_and_end(
    client: TestClient, alice: Key, factory: sessionmaker[Session]
) -> None:
    job_id = _finished_job(client, alice, factory)
    stream = read_stream(client, f"/jobs/{job_id}/events", alice)
    assert stream.retry == 100
    assert stream.ids == [1, 2, 3, 4, 5]
    assert stream.types == ["state", "state", "attempt", "attempt", "state", "end"]
    states = [e["data"].get("state") for e in stream.events]
    assert states == ["queued", "running", None, None, "succeeded", "succeeded"]
    assert [e["data"]["n"] for e in stream.events[2:4]] == [1, 2]
    assert stream.events[3]["data"]["best"] is True and stream.events[3]["data"]["status"] == "pass"
    assert "id" not in stream.events[-1]  # `end` does not move the client's position
    assert stream.events[-1]["data"] == {"state": "succeeded", "last_event_id": 5}


def test_resume_with_last_event_id_or_after(client: TestClient, alice: Key, factory: sessionmaker[Session]) -> None:
    job_id = _finished_job(client, alice, factory)
    assert read_stream(client, f"/jobs/{job_id}/events", alice, **{"Last-Event-ID": "3"}).ids == [4, 5]
    assert read_stream(client, f"/jobs/{job_id}/events?after=2", alice).ids == [3, 4, 5]
    # A browser reconnecting keeps the URL's ?after and adds the header: the header wins.
    assert read_stream(client, f"/jobs/{job_id}/events?after=1", alice, **{"Last-Event-ID": "4"}).ids == [5]
    caught_up = read_stream(client, f"/jobs/{job_id}/events?after=5", alice)
    assert caught_up.ids == [] and caught_up.types == ["end"]
    response = client.get(f"/jobs/{job_id}/events", headers={**alice.headers, "Last-Event-ID": "three"})
    assert response.status_code == 422 and "Last-Event-ID" in response.json()["detail"]


def test_stream_follows_a_live_job_and_ends_at_its_terminal_state(
    client: TestClient, alice: Key, factory: sessionmaker[Session]
) -> None:
    job_id = client.post("/jobs", json=job_body(), headers=alice.headers).json()["id"]
    worker = threading.Thread(target=_run_job, args=(factory, job_id), kwargs={"pause_s": 0.15})
    start = time.monotonic()
    worker.start()
    try:
        stream = read_stream(client, f"/jobs/{job_id}/events", alice)
    finally:
        worker.join()
    assert stream.ids == [1, 2, 3, 4, 5]
    assert stream.types[-2:] == ["state", "end"] and stream.events[-2]["data"]["state"] == "succeeded"
    assert time.monotonic() - start < 5


def test_keep_alive_comments_and_bounded_streams(
    settings, alice: Key, dispatcher: RecordingDispatcher, factory: sessionmaker[Session]
) -> None:
    # Twelve keep-alive periods: a loaded 2-core host once delayed the loop past all but one of six.
    options = StreamOptions(poll_interval_s=0.02, keepalive_s=0.05, max_duration_s=0.6)
    with TestClient(create_app(settings, dispatcher=dispatcher, stream_options=options)) as client:
        job_id = client.post("/jobs", json=job_body(), headers=alice.headers).json()["id"]
        start = time.monotonic()
        stream = read_stream(client, f"/jobs/{job_id}/events", alice)
        elapsed = time.monotonic() - start
        # The job stays queued: the stream closes after max_duration_s, without `end` (reconnect to go on).
        assert stream.ids == [1] and "end" not in stream.types
        assert 0.6 <= elapsed < 3
        assert stream.comments.count("keep-alive") >= 2


def test_stream_of_a_deleted_or_foreign_job(client: TestClient, alice: Key, keys, factory) -> None:
    bob = keys.create("bob")
    job_id = client.post("/jobs", json=job_body(), headers=alice.headers).json()["id"]
    assert client.get(f"/jobs/{job_id}/events", headers=bob.headers).status_code == 404
    assert client.get("/jobs/424242/events", headers=alice.headers).status_code == 404
    assert client.get(f"/jobs/{job_id}/events").status_code == 401


def _streams_open(base: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith("kernelloop_sse_streams "))


def test_over_real_http_events_arrive_as_they_happen_and_a_dropped_client_is_let_go(
    settings, alice: Key, dispatcher: RecordingDispatcher, factory: sessionmaker[Session]
) -> None:
    options = StreamOptions(poll_interval_s=0.02, keepalive_s=15.0, max_duration_s=30.0)
    with serve(create_app(settings, dispatcher=dispatcher, stream_options=options)) as base:
        job_id = httpx.post(f"{base}/jobs", json=job_body(), headers=alice.headers).json()["id"]
        url = f"{base}/jobs/{job_id}/events"
        # A client that reads the first event (the job still queued) and hangs up.
        with httpx.stream("GET", url, headers=alice.headers, timeout=5) as response:
            lines = response.iter_lines()  # kept: dropping the iterator closes the connection
            assert next(line for line in lines if line.startswith("id:")) == "id: 1"
            assert _streams_open(base) == 1
        deadline = time.monotonic() + 3
        while _streams_open(base) != 0:
            assert time.monotonic() < deadline, "the server kept polling for a client that left"
            time.sleep(0.05)
        # A client that stays: it sees each event while the job runs, then the end.
        seen: list[str] = []
        worker = threading.Thread(target=_run_job, args=(factory, job_id), kwargs={"pause_s": 0.1})
        with httpx.stream("GET", url, headers={**alice.headers, "Last-Event-ID": "1"}, timeout=5) as response:
            for line in response.iter_lines():
                if line.startswith("retry:"):  # the stream is open: now the job runs
                    worker.start()
                elif line.startswith(("id:", "event: end")):
                    seen.append(line)
        worker.join()
        assert seen == ["id: 2", "id: 3", "id: 4", "id: 5", "event: end"]


def test_open_streams_share_one_query_of_the_store_per_interval(
    settings, alice: Key, dispatcher: RecordingDispatcher, factory: sessionmaker[Session]
) -> None:
    """Twenty idle streams cost one heads query per interval in all (the `EventHub`), not two
    queries each; the one whose job moves gets its events."""
    interval, streams = 0.05, 20
    options = StreamOptions(poll_interval_s=interval, keepalive_s=15.0, max_duration_s=30.0)
    app = create_app(settings, dispatcher=dispatcher, stream_options=options)
    with serve(app) as base:
        ids = [httpx.post(f"{base}/jobs", json=job_body(), headers=alice.headers).json()["id"] for _ in range(streams)]
        statements: list[str] = []
        listener = lambda conn, cursor, statement, *rest: statements.append(statement)  # noqa: E731

        async def watch_all() -> list[str]:
            async with httpx.AsyncClient(base_url=base, headers=alice.headers, timeout=10) as client:

                async def follow(job_id: int, caught_up: asyncio.Event) -> list[str]:
                    seen: list[str] = []
                    async with client.stream("GET", f"/jobs/{job_id}/events") as response:
                        async for line in response.aiter_lines():
                            seen.append(line)
                            if line == "id: 1":
                                caught_up.set()
                            if line.startswith("event: end"):
                                break
                    return seen

                ready = [asyncio.Event() for _ in ids]
                tasks = [asyncio.create_task(follow(job_id, r)) for job_id, r in zip(ids, ready, strict=True)]
                # Every stream has sent its history (event 1) and idles; the store is watched for 1 s.
                await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 10)
                await asyncio.sleep(2 * interval)
                event.listen(app.state.engine, "before_cursor_execute", listener)
                await asyncio.sleep(1.0)
                event.remove(app.state.engine, "before_cursor_execute", listener)
                await asyncio.to_thread(_run_job, factory, ids[0])
                done = await asyncio.wait_for(tasks[0], 10)
                for task in tasks[1:]:
                    task.cancel()
                await asyncio.gather(*tasks[1:], return_exceptions=True)
                return done

        done = asyncio.run(watch_all())
    # One query per interval (plus slack for a slow machine), however many streams are open.
    assert 0 < len(statements) <= 1.5 / interval, len(statements)
    assert all("last_event_id" in s and "IN" in s for s in statements), statements[:3]
    assert [line for line in done if line.startswith(("id:", "event: end"))] == [
        "id: 1", "id: 2", "id: 3", "id: 4", "id: 5", "event: end"]
