"""A worker killed mid-job: its lease expires, a reaper re-queues the job (or fails it), attempts stay.

Recovery does not rely on broker redelivery: the killed worker's message is never acknowledged,
but it is the job row's lease that brings the job back, and the reaper of another worker that
sends it again.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store import JobState, events_after, get_job, list_attempts, session_scope
from tests.support.waiting import wait_for
from tests.support.worker import (
    agent_job,
    celery_worker_argv,
    embedded_worker_argv,
    make_settings,
    worker_process,
)
from vocabulary.verdict import Status
from worker.celery_app import make_celery
from worker.tasks import RUN_JOB

pytestmark = pytest.mark.slow


def _attempts(factory: sessionmaker[Session], job_id: int) -> list[tuple[str, Status]]:
    with session_scope(factory) as session:
        return [(a.tool, a.status) for a in list_attempts(session=session, job_id=job_id).items]


def _state(factory: sessionmaker[Session], job_id: int) -> JobState:
    with session_scope(factory) as session:
        return get_job(session=session, job_id=job_id).state


def test_a_killed_celery_workers_job_is_requeued_and_finished_by_another(
    tmp_path: Path, postgres_url: str, postgres_factory: sessionmaker[Session], redis_url: str, harness_cache: Path
) -> None:
    settings = make_settings(data_dir=tmp_path, database_url=postgres_url, cache_dir=harness_cache,
                             broker_url=redis_url, max_requeues=1)
    with session_scope(postgres_factory) as session:
        job_id = agent_job(session, "hang_after_compile")
    producer = make_celery(settings)
    producer.send_task(RUN_JOB, args=[job_id], queue="cpu")

    with worker_process(celery_worker_argv("doomed"), settings, tmp_path / "doomed.log") as doomed:
        wait_for(lambda: _attempts(postgres_factory, job_id), timeout=120, what="the first attempt")
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)
    with session_scope(postgres_factory) as session:
        first_worker = get_job(session=session, job_id=job_id).worker_id
    assert _state(postgres_factory, job_id) is JobState.RUNNING  # until its lease runs out

    with worker_process(celery_worker_argv("rescuer"), settings, tmp_path / "rescuer.log"):
        wait_for(lambda: _state(postgres_factory, job_id).is_terminal, timeout=120, interval=0.25,
                 what=f"the rescue (log: {tmp_path / 'rescuer.log'})")
    with session_scope(postgres_factory) as session:
        job = get_job(session=session, job_id=job_id)
        # The script never times a candidate: finished, without a verified kernel, saying so.
        assert job.state is JobState.FAILED and job.error == "no verified kernel (the agent stopped: submitted)"
        assert job.requeue_count == 1 and job.worker_id != first_worker
        events = [e.payload for e in events_after(session=session, job_id=job_id) if e.type == "state"]
    # The doomed worker's attempt stayed; the rescuer found its verdict (dedup) and carried on.
    assert _attempts(postgres_factory, job_id) == [("compile", Status.PASS), ("check_correctness", Status.PASS)]
    assert [e["state"] for e in events] == ["queued", "running", "queued", "running", "failed"]
    assert events[2]["reason"] == f"the lease of worker {first_worker!r} expired; re-queued (1/1)"
    producer.close()


def test_after_max_requeues_a_killed_workers_job_fails_with_the_reason(
    tmp_path: Path, sqlite_url: str, sqlite_factory: sessionmaker[Session], harness_cache: Path
) -> None:
    settings = make_settings(data_dir=tmp_path, database_url=sqlite_url, cache_dir=harness_cache, max_requeues=0)
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "hang_after_compile")
    with worker_process(embedded_worker_argv(), settings, tmp_path / "doomed.log") as doomed:
        wait_for(lambda: _attempts(sqlite_factory, job_id), timeout=120, what="the first attempt")
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)
    with session_scope(sqlite_factory) as session:
        first_worker = get_job(session=session, job_id=job_id).worker_id
    with worker_process(embedded_worker_argv(), settings, tmp_path / "reaper.log"):
        wait_for(lambda: _state(sqlite_factory, job_id).is_terminal, timeout=60, what="the reaper")
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.state is JobState.FAILED
        assert job.error == (f"the lease expired 1 times (last worker {first_worker!r}); "
                             "giving up after 0 re-queues")
    assert _attempts(sqlite_factory, job_id) == [("compile", Status.PASS)]


def test_a_job_committed_without_its_message_is_run_after_a_redispatch_and_duplicates_are_skipped(
    tmp_path: Path, postgres_url: str, postgres_factory: sessionmaker[Session], redis_url: str, harness_cache: Path
) -> None:
    """The API died between committing a job and sending its message: a worker's reaper sends it.
    Another job gets its message twice (and a re-dispatch, maybe): it still runs once."""
    settings = make_settings(data_dir=tmp_path, database_url=postgres_url, cache_dir=harness_cache,
                             broker_url=redis_url, redispatch_after_s=1.0)
    with session_scope(postgres_factory) as session:
        lost = agent_job(session, "fail")
        twice = agent_job(session, "fail")
    producer = make_celery(settings)
    for _ in range(2):
        producer.send_task(RUN_JOB, args=[twice], queue="cpu")
    log = tmp_path / "worker.log"
    with worker_process(celery_worker_argv("solo"), settings, log):
        wait_for(lambda: all(_state(postgres_factory, j).is_terminal for j in (lost, twice)), timeout=120,
                 interval=0.25, what=f"both jobs (log: {log})")
    for job_id in (lost, twice):
        with session_scope(postgres_factory) as session:
            job = get_job(session=session, job_id=job_id)
            states = [e.payload["state"] for e in events_after(session=session, job_id=job_id) if e.type == "state"]
        # The fake agent's "fail" script ends the job with an LLM error: it ran, exactly once.
        assert job.state is JobState.FAILED and "401" in (job.error or "")
        assert states == ["queued", "running", "failed"]
    with session_scope(postgres_factory) as session:
        assert get_job(session=session, job_id=lost).dispatched_at is not None
    assert "sending it again" in log.read_text()
    producer.close()
