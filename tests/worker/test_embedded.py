"""The embedded mode on SQLite: the database is the queue, the same runner runs the jobs."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy.orm import Session, sessionmaker

from config import Settings
from store import (
    JobState,
    Target,
    TrajectoryState,
    cancel_job,
    events_after,
    get_job,
    list_attempts,
    list_messages,
    list_trajectories,
    session_scope,
)
from tests.support import fake_agent
from tests.support.waiting import wait_for
from tests.support.worker import SEED1_CPU, SEED1_CPU_WRONG, agent_job, evaluation_job, quick_options
from vocabulary.verdict import Status
from worker.embedded import EmbeddedWorker
from worker.runner import RunOutcome


def _worker(settings: Settings, factory: sessionmaker[Session], target: Target = Target.CPU) -> EmbeddedWorker:
    return EmbeddedWorker(settings=settings, session_factory=factory, target=target,
                          harness_options=quick_options(settings.resolved_cache_dir), run_agent=fake_agent.run_job)


@pytest.mark.slow
def test_queued_jobs_run_in_order(sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]) -> None:
    with session_scope(sqlite_factory) as session:
        first = evaluation_job(session, SEED1_CPU)
        cuda = evaluation_job(session, SEED1_CPU, target=Target.CUDA)
        second = evaluation_job(session, SEED1_CPU_WRONG)
    worker = _worker(sqlite_settings, sqlite_factory)
    assert worker.serve(max_jobs=2) == 2
    assert worker.run_once() is None  # the CUDA job is not a CPU worker's
    with session_scope(sqlite_factory) as session:
        a, b = get_job(session=session, job_id=first), get_job(session=session, job_id=second)
        assert a.state is b.state is JobState.SUCCEEDED
        assert a.worker_id == b.worker_id == worker.worker_id
        assert a.finished_at is not None and b.started_at is not None and a.finished_at <= b.started_at
        assert get_job(session=session, job_id=cuda).state is JobState.QUEUED
        assert [x.status for x in list_attempts(session=session, job_id=first).items] == [Status.PASS]
        assert [x.status for x in list_attempts(session=session, job_id=second).items] == [Status.FAIL]


def test_cancel_stops_a_running_job_at_the_next_safe_point(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    with session_scope(sqlite_factory) as session:
        running = agent_job(session, "until_cancelled")
        queued = agent_job(session, "until_cancelled")
    worker = _worker(sqlite_settings, sqlite_factory)
    outcomes: list[tuple[int, RunOutcome] | None] = []
    thread = threading.Thread(target=lambda: outcomes.append(worker.run_once()))
    thread.start()

    def messages() -> int:
        with session_scope(sqlite_factory) as session:
            return len(list_messages(session=session, job_id=running).items)

    wait_for(lambda: messages() >= 3, timeout=15, what="the job to be running")
    with session_scope(sqlite_factory) as session:
        cancel_job(session=session, job_id=running)
        cancel_job(session=session, job_id=queued)  # a queued job is cancelled at once
    thread.join(timeout=15)
    assert outcomes == [(running, RunOutcome.CANCELLED)]
    # The agent stops within a heartbeat and a turn of the request.
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=running)
        assert job.state is JobState.CANCELLED
        (trajectory,) = list_trajectories(session=session, job_id=running)
        assert trajectory.state is TrajectoryState.CANCELLED
        types = [e.type for e in events_after(session=session, job_id=running)]
        assert "cancel_requested" in types and types[-1] == "state"
        assert get_job(session=session, job_id=queued).state is JobState.CANCELLED
    assert worker.run_once() is None


@pytest.mark.slow
def test_the_real_agent_with_the_scripted_provider(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    """The agent package itself (the scripted LLM, no network) through the worker: about 45 s on 2 cores,
    most of it the script's deliberate compile error (failed builds are not cached)."""
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "n/a")  # budgets: 4 turns
    worker = EmbeddedWorker(settings=sqlite_settings, session_factory=sqlite_factory, target=Target.CPU,
                            harness_options=quick_options(sqlite_settings.resolved_cache_dir))
    assert worker.run_once() == (job_id, RunOutcome.SUCCEEDED)
    with session_scope(sqlite_factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.state is JobState.SUCCEEDED and job.tokens_in > 0 and job.tokens_out > 0
        attempts = list_attempts(session=session, job_id=job_id).items
        statuses = [(a.tool, a.status.value) for a in attempts]
        assert statuses[0] == ("compile", "error") and ("benchmark", "pass") in statuses, statuses
        assert job.best_attempt_id is not None
        (trajectory,) = list_trajectories(session=session, job_id=job_id)
        assert trajectory.state is TrajectoryState.EXHAUSTED and trajectory.turns == 4
        types = {e.type for e in events_after(session=session, job_id=job_id, limit=500)}
    assert {"state", "progress", "trajectory", "message", "attempt"} <= types
