"""Leases: the atomic claim of a queued job, heartbeats, finishing a claimed job, and the reaper.

A worker holds a job by its lease (``worker_id`` and ``lease_expires_at`` on the row): every write
of the worker renews it (`heartbeat`), `finish_job` ends it, and `reap_expired_leases` re-queues
(or fails) jobs whose worker stopped renewing. Moves go through `store.states.transition` and a
guarded ``UPDATE`` as in `store.jobs`. None of these functions commits (see `store.db`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import TypedDict

from sqlalchemy import ColumnElement, func, literal, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.util import identity_key

from store._sql import dialect_name, write_row
from store.errors import IllegalTransition, LeaseLost, NotFound
from store.events import append_event
from store.models import Job, UTCDateTime, utcnow
from store.states import JobState, Target, transition
from vocabulary.events import EventType, StatePayload

__all__ = [
    "LeaseStatus",
    "ReapedJob",
    "claim_job",
    "claim_next_job",
    "finish_job",
    "heartbeat",
    "lease_status",
    "reap_expired_leases",
    "redispatch_stale_jobs",
]

# A claim that finds its chosen row taken (PostgreSQL, between the subquery and the update)
# tries again; more than a few losses in a row means something else is wrong.
_CLAIM_TRIES = 5


def _state_event(
    session: Session, job_id: int, state: JobState, previous: JobState, now: datetime, *,
    reason: str | None = None, error: str | None = None, worker_id: str | None = None,
) -> None:
    payload = StatePayload(state=state.value, previous=previous.value, reason=reason, error=error,
                           worker_id=worker_id)
    append_event(session=session, job_id=job_id, type=EventType.STATE, payload=payload.to_dict(), now=now)


def _refresh(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id, populate_existing=True)
    if job is None:
        raise NotFound("job", job_id)
    return job


class LeaseStatus(Enum):
    """What a heartbeat learnt."""

    #: The lease is extended; carry on.
    HELD = "held"
    #: The lease is extended, and the job's owner asked to cancel: stop and finish as cancelled.
    CANCEL_REQUESTED = "cancel_requested"
    #: The job is no longer this worker's (reaped, cancelled, finished): stop, store nothing more.
    LOST = "lost"


@dataclass(frozen=True)
class ReapedJob:
    """One job whose lease expired, and where the reaper sent it."""

    job_id: int
    state: JobState
    worker_id: str | None
    reason: str


def claim_next_job(
    *,
    session: Session,
    worker_id: str,
    target: Target,
    lease_seconds: float,
    now: datetime | None = None,
) -> Job | None:
    """Atomically take the oldest queued job of ``target`` and start its lease.

    One statement, ``UPDATE jobs SET state='running', … WHERE id = (oldest queued id) AND
    state='queued' RETURNING id``. On PostgreSQL the inner select is ``FOR UPDATE SKIP LOCKED``,
    so concurrent workers take different jobs instead of queueing on one row; on SQLite the
    statement runs under the database's single write lock. The ``state='queued'`` guard and the
    returned row decide who won. Commit soon after: until then the claim is not visible.

    ``worker_id`` must be unique per worker process (host, pid and a random part): heartbeats and
    `finish_job` are guarded by it, and a re-queued job claimed again under a reused id would
    let a stale process keep acting on it.

    Returns:
        The claimed job, now ``running`` under ``worker_id``; ``None`` when nothing is queued.
    """
    if lease_seconds <= 0:
        raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
    now = now or utcnow()
    transition(JobState.QUEUED, JobState.RUNNING)
    for _ in range(_CLAIM_TRIES):
        oldest = (
            select(Job.id)
            .where(Job.state == JobState.QUEUED, Job.target == Target(target))
            .order_by(Job.id)
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        stmt = (
            update(Job)
            .where(Job.id == oldest, Job.state == JobState.QUEUED)
            .values(_lease_values(worker_id, now, lease_seconds))
            .returning(Job.id)
            .execution_options(synchronize_session=False)
        )
        job_id = session.execute(stmt).scalar_one_or_none()
        if job_id is not None:
            _state_event(session, job_id, JobState.RUNNING, JobState.QUEUED, now, worker_id=worker_id)
            return _refresh(session, job_id)
        queued = select(Job.id).where(Job.state == JobState.QUEUED, Job.target == Target(target))
        if dialect_name(session) == "postgresql":
            # Rows other claimers hold are theirs; seeing only those means there is nothing for us.
            queued = queued.with_for_update(skip_locked=True)
        if session.scalar(queued.limit(1)) is None:
            return None
    return None


class _ClaimColumns(TypedDict):
    state: JobState
    worker_id: str
    heartbeat_at: datetime
    lease_expires_at: datetime
    started_at: ColumnElement[datetime]


class _ReapColumns(TypedDict, total=False):
    error: str
    finished_at: datetime
    requeue_count: ColumnElement[int]
    worker_id: None
    heartbeat_at: None
    dispatched_at: datetime


def _lease_values(worker_id: str, now: datetime, lease_seconds: float) -> _ClaimColumns:
    """The columns a claim sets: the worker's lease, and the first start (kept across re-queues)."""
    return _ClaimColumns(
        state=JobState.RUNNING,
        worker_id=worker_id,
        heartbeat_at=now,
        lease_expires_at=now + timedelta(seconds=lease_seconds),
        # The literal is typed so it is stored in UTC.
        started_at=func.coalesce(Job.started_at, literal(now, UTCDateTime())),
    )


def claim_job(
    *,
    session: Session,
    job_id: int,
    worker_id: str,
    lease_seconds: float,
    target: Target | None = None,
    now: datetime | None = None,
) -> Job | None:
    """Atomically take one job by id, if it is still queued, and start its lease.

    What a worker does when a broker message names the job: one guarded
    ``UPDATE jobs … WHERE id = :id AND state = 'queued' RETURNING id``, so of two deliveries of
    the same message (or a message and a re-dispatch after the reaper) only one runs the job.
    ``worker_id`` must be unique per worker process, as for `claim_next_job`.

    Args:
        target: claim only a job of this target (a CPU worker must not run a CUDA job that was
            sent to the wrong queue); ``None`` for any.

    Returns:
        The claimed job, now ``running`` under ``worker_id``; ``None`` when the job is not
        queued any more (claimed, cancelled, finished, deleted) or is of another target.
    """
    if lease_seconds <= 0:
        raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
    now = now or utcnow()
    transition(JobState.QUEUED, JobState.RUNNING)
    guard = [Job.id == job_id, Job.state == JobState.QUEUED]
    if target is not None:
        guard.append(Job.target == Target(target))
    stmt = update(Job).where(*guard).values(_lease_values(worker_id, now, lease_seconds)).returning(Job.id)
    if write_row(session, Job, job_id, stmt) is None:
        return None
    _state_event(session, job_id, JobState.RUNNING, JobState.QUEUED, now, worker_id=worker_id)
    return _refresh(session, job_id)


def heartbeat(
    *,
    session: Session,
    job_id: int,
    worker_id: str,
    lease_seconds: float,
    now: datetime | None = None,
) -> LeaseStatus:
    """Extend the lease of a job the worker runs, and tell it whether to stop.

    A worker whose lease ran out but which the reaper has not reached yet still holds the job.
    """
    now = now or utcnow()
    stmt = (
        update(Job)
        .where(Job.id == job_id, Job.state == JobState.RUNNING, Job.worker_id == worker_id)
        .values(heartbeat_at=now, lease_expires_at=now + timedelta(seconds=lease_seconds))
        .returning(Job.cancel_requested)
    )
    cancel_requested = write_row(session, Job, job_id, stmt)
    if cancel_requested is None:
        return LeaseStatus.LOST
    return LeaseStatus.CANCEL_REQUESTED if cancel_requested else LeaseStatus.HELD


def lease_status(*, session: Session, job_id: int, worker_id: str) -> LeaseStatus:
    """What a heartbeat would learn, without renewing the lease (a read): a worker asks this
    every second or so, to act on a cancel within seconds, and renews only every heartbeat."""
    row = session.execute(
        select(Job.cancel_requested).where(Job.id == job_id, Job.state == JobState.RUNNING,
                                           Job.worker_id == worker_id)).one_or_none()
    if row is None:
        return LeaseStatus.LOST
    return LeaseStatus.CANCEL_REQUESTED if row[0] else LeaseStatus.HELD


def finish_job(
    *,
    session: Session,
    job_id: int,
    worker_id: str,
    state: JobState,
    error: str | None = None,
    now: datetime | None = None,
) -> Job:
    """Move a running job the worker holds to ``succeeded``, ``failed`` or ``cancelled``.

    Raises:
        IllegalTransition: ``state`` is not a terminal state.
        LeaseLost: the job is not running under ``worker_id`` any more.
    """
    now = now or utcnow()
    transition(JobState.RUNNING, state)
    if not state.is_terminal:
        raise IllegalTransition(JobState.RUNNING.value, state.value, "a worker only finishes jobs")
    stmt = (
        update(Job)
        .where(Job.id == job_id, Job.state == JobState.RUNNING, Job.worker_id == worker_id)
        .values(state=state, error=error, finished_at=now, lease_expires_at=None)
        .returning(Job.id)
    )
    if write_row(session, Job, job_id, stmt) is None:
        raise LeaseLost(job_id, worker_id)
    _state_event(session, job_id, state, JobState.RUNNING, now, error=error)
    return _refresh(session, job_id)


def reap_expired_leases(
    *, session: Session, max_requeues: int, now: datetime | None = None
) -> list[ReapedJob]:
    """Hand back to the queue every running job whose lease expired, or end it.

    A job that was asked to cancel becomes ``cancelled``; one already re-queued ``max_requeues``
    times becomes ``failed`` with the reason in ``error``; any other goes back to ``queued``
    (its trajectories, messages and attempts stay, so the next worker can build on them).
    Each move is guarded on the lease still being expired, so a heartbeat that lands first wins.
    """
    if max_requeues < 0:
        raise ValueError(f"max_requeues must be >= 0, got {max_requeues}")
    now = now or utcnow()
    expired = (
        select(Job.id, Job.worker_id, Job.requeue_count, Job.cancel_requested)
        .where(Job.state == JobState.RUNNING, Job.lease_expires_at < now)
        .order_by(Job.id)
    )
    if dialect_name(session) == "postgresql":
        expired = expired.with_for_update(skip_locked=True)
    reaped: list[ReapedJob] = []
    for job_id, worker_id, requeues, cancel_requested in session.execute(expired).all():
        values: _ReapColumns
        if cancel_requested:
            target = JobState.CANCELLED
            reason = f"cancelled; the lease of worker {worker_id!r} expired before it stopped"
            values = _ReapColumns(error=reason, finished_at=now)
        elif requeues >= max_requeues:
            target = JobState.FAILED
            reason = (
                f"the lease expired {requeues + 1} times (last worker {worker_id!r}); "
                f"giving up after {max_requeues} re-queues"
            )
            values = _ReapColumns(error=reason, finished_at=now)
        else:
            target = JobState.QUEUED
            reason = f"the lease of worker {worker_id!r} expired; re-queued ({requeues + 1}/{max_requeues})"
            values = _ReapColumns(requeue_count=Job.requeue_count + 1, worker_id=None, heartbeat_at=None,
                                  dispatched_at=now)
        transition(JobState.RUNNING, target, lease_recovery=True)
        stmt = (
            update(Job)
            .where(Job.id == job_id, Job.state == JobState.RUNNING, Job.lease_expires_at < now)
            .values(state=target, lease_expires_at=None, **values)
            .returning(Job.id)
        )
        if write_row(session, Job, job_id, stmt) is None:
            continue
        _state_event(session, job_id, target, JobState.RUNNING, now, reason=reason, worker_id=worker_id)
        reaped.append(ReapedJob(job_id=job_id, state=target, worker_id=worker_id, reason=reason))
    return reaped


def redispatch_stale_jobs(
    *, session: Session, older_than_s: float, now: datetime | None = None
) -> list[tuple[int, Target]]:
    """Queued jobs that no worker took within ``older_than_s`` of their creation or of their last
    dispatch, stamped as dispatched now: the caller sends each one's message again after commit.

    A job is committed before its message is sent, so a process that dies in between (or a
    broker that loses the message) leaves a queued job no worker will hear of. One guarded
    ``UPDATE … WHERE state = 'queued' AND coalesce(dispatched_at, created_at) < :cutoff
    RETURNING id, target`` picks them: of several reapers each job goes to one, and it is not
    picked again before another ``older_than_s``. A job that was only waiting its turn gets a
    second message, which the worker skips (it claims by id, `claim_job`).

    Returns:
        ``(job id, target)`` of each job to send again, oldest first.
    """
    if older_than_s <= 0:
        raise ValueError(f"older_than_s must be positive, got {older_than_s}")
    now = now or utcnow()
    cutoff = literal(now - timedelta(seconds=older_than_s), UTCDateTime())
    stmt = (
        update(Job)
        .where(Job.state == JobState.QUEUED, func.coalesce(Job.dispatched_at, Job.created_at) < cutoff)
        .values(dispatched_at=now)
        .returning(Job.id, Job.target)
        .execution_options(synchronize_session=False)
    )
    picked = sorted((job_id, Target(target)) for job_id, target in session.execute(stmt))
    for job_id, _ in picked:  # loaded copies re-read their row on next access (as `write_row` does)
        loaded = session.identity_map.get(identity_key(Job, job_id))
        if loaded is not None:
            session.expire(loaded, ["dispatched_at"])
    return picked
