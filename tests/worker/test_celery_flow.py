"""``POST /evaluations`` through Redis: a job in PostgreSQL, the task sent by name, a real Celery worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from config import Settings
from store import JobState, events_after, get_job, list_attempts, session_scope
from tests.support.processes import mapped_files
from tests.support.waiting import wait_for
from tests.support.worker import celery_worker_argv, evaluation_job, make_settings, worker_process
from vocabulary.verdict import Status
from worker.celery_app import make_celery
from worker.tasks import RUN_JOB

pytestmark = pytest.mark.slow


@pytest.fixture
def settings(tmp_path: Path, postgres_url: str, redis_url: str, harness_cache: Path) -> Settings:
    return make_settings(data_dir=tmp_path, database_url=postgres_url, cache_dir=harness_cache, broker_url=redis_url)


def _finished(factory: sessionmaker[Session], job_id: int) -> JobState | None:
    with session_scope(factory) as session:
        state = get_job(session=session, job_id=job_id).state
        return state if state.is_terminal else None


def test_an_evaluation_flows_through_redis_to_a_celery_worker_and_back(
    settings: Settings, postgres_factory: sessionmaker[Session], tmp_path: Path
) -> None:
    with session_scope(postgres_factory) as session:
        job_id = evaluation_job(session)
    # What the API's dispatcher does: the task by name, the job's id, the target's queue.
    producer = make_celery(settings)
    producer.send_task(RUN_JOB, args=[job_id], queue=settings.queue_for("cpu"))

    log = tmp_path / "celery.log"
    with worker_process(celery_worker_argv("w1"), settings, log) as worker:
        state = wait_for(lambda: _finished(postgres_factory, job_id), timeout=180, interval=0.25,
                         what=f"job {job_id} to finish (worker log: {log})")
        assert state is JobState.SUCCEEDED, log.read_text()[-3000:]
        # The Celery process never loaded torch (so it never initialised CUDA either).
        assert "torch" not in mapped_files(worker.pid)

        # A second delivery of the same message finds nothing to claim.
        producer.send_task(RUN_JOB, args=[job_id], queue=settings.queue_for("cpu"))
        wait_for(lambda: log.read_text().count("succeeded in") >= 2, timeout=30, what="the duplicate delivery")
    text = log.read_text()
    assert "'succeeded'" in text and "'skipped'" in text
    with session_scope(postgres_factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.worker_id is not None and job.worker_id.startswith("celery-cpu@")
        (attempt,) = list_attempts(session=session, job_id=job_id).items
        assert attempt.status is Status.PASS and attempt.tool == "evaluate" and attempt.median_ms
        assert attempt.verdict["correct"] and attempt.verdict["provenance"]["target"] == "cpu"
        assert job.best_attempt_id == attempt.id
        events = [(e.id, e.type, e.payload) for e in events_after(session=session, job_id=job_id)]
    assert [i for i, _, _ in events] == list(range(1, len(events) + 1))
    # The referee's steps arrive as ``stage`` events between the worker's own.
    assert {p["stage"] for _, t, p in events if t == "stage"} >= {"reference_start", "compile", "timing"}
    events = [e for e in events if e[1] != "stage"]
    assert [t for _, t, _ in events] == ["state", "state", "progress", "progress", "attempt", "state"]
    assert events[1][2]["state"] == "running" and events[1][2]["worker_id"] == job.worker_id
    assert events[4][2]["status"] == "pass" and events[4][2]["best"] is True
    assert events[5][2] == {"state": "succeeded", "previous": "running"}
    producer.close()
