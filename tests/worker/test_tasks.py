"""The task body: claim that job or skip it, forward a misrouted one, retry while the database is down."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from config import Settings
from store import JobState, Target, cancel_job, get_job, make_engine, make_session_factory, session_scope
from tests.support import fake_agent
from tests.support.worker import agent_job, evaluation_job
from worker.celery_app import make_celery
from worker.lease import check_lease_settings
from worker.tasks import RUN_JOB, SKIPPED, DatabaseUnavailable, WorkerContext, claim_and_run, register_tasks


def _context(settings: Settings, factory: sessionmaker[Session], target: Target = Target.CPU) -> WorkerContext:
    return WorkerContext(settings=settings, session_factory=factory, worker_id="celery-test", target=target,
                         run_agent=fake_agent.run_job)


def _never(job_id: int, target: Target) -> None:
    raise AssertionError(f"nothing should be forwarded, got job {job_id}")


def test_a_job_of_another_target_is_forwarded_to_its_queue(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = evaluation_job(session, target=Target.CUDA)
    forwarded: list[tuple[int, Target]] = []
    assert claim_and_run(_context(sqlite_settings, sqlite_factory), job_id,
                         forward=lambda *a: forwarded.append(a)) == SKIPPED
    assert forwarded == [(job_id, Target.CUDA)]
    with session_scope(sqlite_factory) as session:
        assert get_job(session=session, job_id=job_id).state is JobState.QUEUED


def test_a_cancelled_or_unknown_job_is_skipped(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "until_cancelled")
        cancel_job(session=session, job_id=job_id)
    context = _context(sqlite_settings, sqlite_factory)
    assert claim_and_run(context, job_id, forward=_never) == SKIPPED
    assert claim_and_run(context, job_id + 1000, forward=_never) == SKIPPED


def test_a_claim_without_a_database_raises_for_a_retry(sqlite_settings: Settings) -> None:
    engine = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
    try:
        with pytest.raises(DatabaseUnavailable, match="claiming job 7"):
            claim_and_run(_context(sqlite_settings, make_session_factory(engine)), 7, forward=_never)
    finally:
        engine.dispose()


def test_the_task_retries_database_outages_with_backoff(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    app = make_celery(sqlite_settings.model_copy(update={"broker_url": "redis://127.0.0.1:6379/14"}))
    register_tasks(app, _context(sqlite_settings, sqlite_factory))
    task = app.tasks[RUN_JOB]
    assert task.autoretry_for == (DatabaseUnavailable,) and task.max_retries is None
    assert task.retry_backoff == 2 and task.retry_backoff_max == 60 and task.acks_late


def test_lease_settings_are_checked() -> None:
    check_lease_settings(lease_seconds=120, heartbeat_seconds=15)
    for heartbeat in (0, 61, 200):
        with pytest.raises(ValueError, match="HEARTBEAT"):
            check_lease_settings(lease_seconds=120, heartbeat_seconds=heartbeat)


def test_two_apps_in_one_process_keep_their_own_task(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    settings = sqlite_settings.model_copy(update={"broker_url": "redis://127.0.0.1:6379/14"})
    first, second = make_celery(settings), make_celery(settings)
    register_tasks(first, _context(settings, sqlite_factory, Target.CPU))
    assert RUN_JOB not in second.tasks  # not shared with apps made later
    register_tasks(second, _context(settings, sqlite_factory, Target.CUDA))
    assert first.tasks[RUN_JOB] is not second.tasks[RUN_JOB]
