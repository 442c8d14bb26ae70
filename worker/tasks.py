"""The Celery tasks: thin, named explicitly, taking ids.

``kernelloop.run_job(job_id)`` claims THAT job atomically if it is still queued
(`store.claim_job`), runs it (`worker.runner.run_claimed_job`, which also persists the outcome) and
returns the outcome's name. A duplicate delivery, a job cancelled while queued, or a job of
another target finds nothing to claim and returns ``skipped`` (a job sent to the wrong queue is
forwarded to its own). The task is idempotent: the job row, not the message, says what happens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from celery import Celery
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from config import Settings
from harness import HarnessOptions, Referee
from store import JobState, NotFound, Target, claim_job, get_job, session_scope
from worker.runner import AgentRunner, RefereeFactory, run_claimed_job

__all__ = [
    "RUN_JOB",
    "SKIPPED",
    "DatabaseUnavailable",
    "WorkerContext",
    "celery_dispatch",
    "claim_and_run",
    "register_tasks",
]

log = logging.getLogger(__name__)

#: The task's name: what the API sends (``send_task(RUN_JOB, args=[job_id], queue=…)``).
RUN_JOB = "kernelloop.run_job"
#: What the task returns when there was nothing for it to run.
SKIPPED = "skipped"
#: A claim that could not reach the database is retried after 2, 4, 8 … s, at most this apart,
#: for as long as it takes: the message is the job's only announcement (its lease does not exist
#: yet, so the reaper cannot bring it back).
CLAIM_RETRY_MAX_S = 60


class DatabaseUnavailable(Exception):
    """The database could not be reached to claim a job; the task is retried later."""


@dataclass(frozen=True)
class WorkerContext:
    """What a worker process's tasks need, built once at start-up.

    Args:
        settings: the service settings.
        session_factory: sessions on the service's database.
        worker_id: this process's unique id (`worker.lease.new_worker_id`).
        target: the target this worker runs (its queue is ``settings.queue_for(target)``).
        harness_options: overrides the harness options built from the settings (tests).
        run_agent: runs an agent job (default `agent.run_job`; tests and the load run pass their own).
        referee_factory: builds the referees (default `harness.Referee`; the load run's double
            judges nothing).
    """

    settings: Settings
    session_factory: sessionmaker[Session]
    worker_id: str
    target: Target
    harness_options: HarnessOptions | None = None
    run_agent: AgentRunner | None = field(default=None)
    referee_factory: RefereeFactory = field(default=Referee)


def celery_dispatch(app: Celery, settings: Settings) -> Callable[[int, Target], None]:
    """Sends ``kernelloop.run_job`` for a job to its target's queue (the reaper's re-dispatch)."""

    def dispatch(job_id: int, target: Target) -> None:
        app.send_task(RUN_JOB, args=[job_id], queue=settings.queue_for(Target(target).value))

    return dispatch


def claim_and_run(context: WorkerContext, job_id: int, *, forward: Callable[[int, Target], None]) -> str:
    """The body of ``kernelloop.run_job``: claim the job by id, run it, return the outcome.

    Raises:
        DatabaseUnavailable: the claim could not reach the database (the task retries).
    """
    try:
        with session_scope(context.session_factory) as session:
            claimed = claim_job(session=session, job_id=job_id, worker_id=context.worker_id,
                                lease_seconds=context.settings.lease_seconds, target=context.target)
            misrouted = None if claimed is not None else _misrouted_target(session, job_id, context.target)
    except (OperationalError, InterfaceError) as exc:
        raise DatabaseUnavailable(f"claiming job {job_id}: {exc.orig or exc}") from exc
    if claimed is None:
        if misrouted is not None:
            log.warning("job %s is a %s job; forwarding it from a %s worker", job_id, misrouted, context.target)
            forward(job_id, misrouted)
        return SKIPPED
    outcome = run_claimed_job(job_id, settings=context.settings, session_factory=context.session_factory,
                              worker_id=context.worker_id, harness_options=context.harness_options,
                              run_agent=context.run_agent, referee_factory=context.referee_factory)
    return outcome.value


def _misrouted_target(session: Session, job_id: int, target: Target) -> Target | None:
    """The job's target, if it is still queued and this worker's target is not it."""
    try:
        job = get_job(session=session, job_id=job_id)
    except NotFound:
        return None
    return job.target if job.state is JobState.QUEUED and job.target is not target else None


def register_tasks(app: Celery, context: WorkerContext) -> None:
    """Register the worker's tasks on ``app``, bound to ``context``."""
    forward = celery_dispatch(app, context.settings)

    # shared=False: the task belongs to this app and context only (Celery otherwise adds it to
    # every app created later in the process, bound to this context).
    @app.task(name=RUN_JOB, shared=False, ignore_result=True, acks_late=True, autoretry_for=(DatabaseUnavailable,),
              retry_backoff=2, retry_backoff_max=CLAIM_RETRY_MAX_S, retry_jitter=True, max_retries=None)
    def run_job_task(job_id: int) -> str:
        return claim_and_run(context, int(job_id), forward=forward)
