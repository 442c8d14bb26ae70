"""Jobs: creation, reads, cancel, usage totals, deletion (claims and leases: `store.leases`).

Every state move checks `store.states.transition` first, then runs a guarded
``UPDATE jobs … WHERE id = :id AND state = :current`` (plus the worker's id where a worker acts),
so a move that lost a race matches no row instead of overwriting the winner; and appends a
``state`` event in the same transaction. None of these functions commits (see `store.db`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from sqlalchemy import delete, exists, select, update
from sqlalchemy.orm import Session

from store._sql import write_row
from store.errors import IllegalTransition, NotFound, StoreError
from store.events import append_event
from store.leases import (
    _state_event,
)
from store.models import Job, JobEvent, StoredProblem, utcnow
from store.pagination import DEFAULT_PAGE_SIZE, RowPage, offset_page
from store.states import JobKind, JobState, Target, transition
from vocabulary.events import CancelRequestedPayload, EventType, StatePayload
from vocabulary.wire import JsonObject

__all__ = [
    "CancelOutcome",
    "JobProblem",
    "NewJob",
    "add_job_usage",
    "cancel_job",
    "create_job",
    "create_jobs",
    "delete_job",
    "discard_new_jobs",
    "get_job",
    "list_job_problems",
    "list_jobs",
]

_CANCEL_TRIES = 3


class CancelOutcome(Enum):
    #: The job was queued and is now cancelled.
    CANCELLED = "cancelled"
    #: The job is running; its worker will stop at its next heartbeat.
    REQUESTED = "requested"
    #: The job had already finished; nothing changed.
    ALREADY_FINISHED = "already_finished"


@dataclass(frozen=True)
class NewJob:
    """One job to queue: `create_jobs`'s (and `create_job`'s) arguments."""

    problem_id: int
    target: Target
    owner_id: int | None = None
    kind: JobKind = JobKind.AGENT
    llm_profile: str | None = None
    llm_model: str | None = None
    budgets: JsonObject | None = None
    trajectories_count: int = 1
    candidate_source: str | None = None


def create_job(
    *,
    session: Session,
    problem_id: int,
    target: Target,
    owner_id: int | None = None,
    kind: JobKind = JobKind.AGENT,
    llm_profile: str | None = None,
    llm_model: str | None = None,
    budgets: JsonObject | None = None,
    trajectories_count: int = 1,
    candidate_source: str | None = None,
    now: datetime | None = None,
) -> Job:
    """Queue one job (`create_jobs` with one `NewJob`).

    Raises:
        ValueError: the arguments do not describe a runnable job.
    """
    spec = NewJob(problem_id=problem_id, target=target, owner_id=owner_id, kind=kind, llm_profile=llm_profile,
                  llm_model=llm_model, budgets=budgets, trajectories_count=trajectories_count,
                  candidate_source=candidate_source)
    return create_jobs(session=session, specs=[spec], now=now)[0]


def create_jobs(*, session: Session, specs: Sequence[NewJob], now: datetime | None = None) -> list[Job]:
    """Queue many jobs, each with its ``queued`` event, in two multi-row ``INSERT``s (what the API's
    group commit uses: one transaction for a burst of submissions instead of one each).

    An agent job needs at least one trajectory; an evaluation job needs its candidate. Each job's
    first event gets id 1 and the job's ``last_event_id`` is set to 1 by the insert itself rather
    than by `append_event`'s ``UPDATE``: no one can append to a job before the transaction that
    creates it commits.

    Raises:
        ValueError: a spec does not describe a runnable job (nothing is added).
    """
    for spec in specs:
        if spec.kind is JobKind.AGENT and spec.trajectories_count < 1:
            raise ValueError(f"an agent job needs at least one trajectory, got {spec.trajectories_count}")
        if spec.kind is JobKind.EVALUATION and not spec.candidate_source:
            raise ValueError("an evaluation job needs candidate_source")
    now = now or utcnow()
    jobs = [
        Job(
            kind=spec.kind,
            owner_id=spec.owner_id,
            problem_id=spec.problem_id,
            target=Target(spec.target),
            candidate_source=spec.candidate_source,
            llm_profile=spec.llm_profile,
            llm_model=spec.llm_model,
            budgets=dict(spec.budgets or {}),
            trajectories_count=spec.trajectories_count if spec.kind is JobKind.AGENT else 0,
            state=JobState.QUEUED,
            last_event_id=1,
            created_at=now,
        )
        for spec in specs
    ]
    session.add_all(jobs)
    session.flush()
    payload = StatePayload(state=JobState.QUEUED.value).to_dict()
    session.add_all([
        JobEvent(job_id=job.id, id=1, type=EventType.STATE.value, payload=dict(payload), created_at=now)
        for job in jobs
    ])
    session.flush()
    return jobs


def discard_new_jobs(*, session: Session, job_ids: Collection[int]) -> None:
    """Remove jobs this transaction created and has not committed (no one else has seen them),
    with their events (ON DELETE CASCADE), and any problem source this leaves unused and unbundled.

    What the API's writer does with submissions its quotas refuse: it inserts a batch before it
    locks the keys, so that the lock is held only for the counts and the commit. The session's
    objects of these jobs are stale afterwards: the caller drops them.
    """
    if not job_ids:
        return
    problem_ids = set(session.scalars(
        delete(Job).where(Job.id.in_(job_ids)).returning(Job.problem_id).execution_options(synchronize_session=False)
    ))
    session.execute(
        delete(StoredProblem)
        .where(StoredProblem.id.in_(problem_ids), StoredProblem.bundled_id.is_(None),
               ~exists().where(Job.problem_id == StoredProblem.id))
        .execution_options(synchronize_session=False)
    )


def get_job(*, session: Session, job_id: int) -> Job:
    """The job, or NotFound."""
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound("job", job_id)
    return job


def list_jobs(
    *,
    session: Session,
    owner_id: int | None = None,
    state: JobState | None = None,
    target: Target | None = None,
    problem: str | None = None,
    limit: int = DEFAULT_PAGE_SIZE,
    offset: int = 0,
) -> RowPage[Job]:
    """Jobs, newest first; ``owner_id=None`` lists every owner's (for admin keys).

    ``problem`` is a bundled id (``level1/softmax``) or a problem's sha256 (posted sources have
    no id); ``state`` and ``target`` filter likewise.
    """
    stmt = select(Job).order_by(Job.id.desc())
    if owner_id is not None:
        stmt = stmt.where(Job.owner_id == owner_id)
    if state is not None:
        stmt = stmt.where(Job.state == state)
    if target is not None:
        stmt = stmt.where(Job.target == target)
    if problem is not None:
        matching = select(StoredProblem.id).where(
            (StoredProblem.bundled_id == problem) | (StoredProblem.sha256 == problem.lower())
        )
        stmt = stmt.where(Job.problem_id.in_(matching))
    return offset_page(session, stmt, limit=limit, offset=offset)


@dataclass(frozen=True)
class JobProblem:
    """A problem some listed jobs ran: its bundled id (``None`` for a posted source) and sha256."""

    bundled_id: str | None
    sha256: str


def list_job_problems(*, session: Session, owner_id: int | None = None) -> list[JobProblem]:
    """The distinct problems of an owner's jobs (every owner's for ``None``), bundled ids first."""
    stmt = select(StoredProblem.bundled_id, StoredProblem.sha256).where(
        StoredProblem.id.in_(
            select(Job.problem_id).where(Job.owner_id == owner_id) if owner_id is not None
            else select(Job.problem_id)
        )
    )
    rows = [JobProblem(bundled_id=b, sha256=s) for b, s in session.execute(stmt)]
    return sorted(rows, key=lambda p: (p.bundled_id is None, p.bundled_id or "", p.sha256))


def cancel_job(
    *, session: Session, job_id: int, reason: str = "cancelled by its owner", now: datetime | None = None
) -> CancelOutcome:
    """Cancel a job: at once if queued; by a request its worker acts on if running.

    Raises:
        NotFound: no job with that id.
    """
    now = now or utcnow()
    # A queued job may be claimed, or a running one finish or be reaped, between our read and
    # our guarded update: read again and act on what it became.
    for _ in range(_CANCEL_TRIES):
        row = session.execute(select(Job.state, Job.cancel_requested).where(Job.id == job_id)).one_or_none()
        if row is None:
            raise NotFound("job", job_id)
        current, already_requested = row
        if current.is_terminal:
            return CancelOutcome.ALREADY_FINISHED
        if current is JobState.QUEUED:
            transition(current, JobState.CANCELLED)
            stmt = (
                update(Job)
                .where(Job.id == job_id, Job.state == JobState.QUEUED)
                .values(state=JobState.CANCELLED, error=reason, finished_at=now)
                .returning(Job.id)
            )
            if write_row(session, Job, job_id, stmt) is not None:
                _state_event(session, job_id, JobState.CANCELLED, JobState.QUEUED, now, reason=reason)
                return CancelOutcome.CANCELLED
            continue
        if already_requested:
            return CancelOutcome.REQUESTED
        stmt = (
            update(Job)
            .where(Job.id == job_id, Job.state == JobState.RUNNING, Job.cancel_requested.is_(False))
            .values(cancel_requested=True)
            .returning(Job.id)
        )
        if write_row(session, Job, job_id, stmt) is not None:
            append_event(session=session, job_id=job_id, type=EventType.CANCEL_REQUESTED,
                         payload=CancelRequestedPayload().to_dict(), now=now)
            return CancelOutcome.REQUESTED
    raise StoreError(f"job {job_id} kept changing state while being cancelled; try again")


def add_job_usage(
    *,
    session: Session,
    job_id: int,
    tokens_in: int = 0,
    tokens_out: int = 0,
    cost_usd: float = 0.0,
    gpu_seconds: float = 0.0,
    tokens_reasoning: int = 0,
    tokens_cached: int = 0,
) -> None:
    """Add to a job's totals in one atomic ``UPDATE`` (concurrent trajectories add safely).

    `store.trajectories.append_message` already adds each message's tokens and cost; call this
    for what messages do not carry (GPU seconds, LLM calls that produced no message: abandoned or
    failed tries are paid for too). ``tokens_reasoning`` and ``tokens_cached`` are parts of
    ``tokens_out`` and ``tokens_in``, not additions to them. Like every write to the job row, it
    holds the row's lock until commit.

    Raises:
        NotFound: no job with that id.
    """
    stmt = (
        update(Job)
        .where(Job.id == job_id)
        .values(
            tokens_in=Job.tokens_in + tokens_in,
            tokens_out=Job.tokens_out + tokens_out,
            cost_usd=Job.cost_usd + cost_usd,
            gpu_seconds=Job.gpu_seconds + gpu_seconds,
            tokens_reasoning=Job.tokens_reasoning + tokens_reasoning,
            tokens_cached=Job.tokens_cached + tokens_cached,
        )
        .returning(Job.id)
    )
    if write_row(session, Job, job_id, stmt) is None:
        raise NotFound("job", job_id)


def delete_job(*, session: Session, job_id: int) -> None:
    """Delete a finished job with its trajectories, messages, attempts (their code) and events,
    and its problem's source when no other job uses it and it is not a bundled problem.

    Raises:
        NotFound: no job with that id.
        IllegalTransition: the job is queued or running; cancel it first.
    """
    row = session.execute(select(Job.state, Job.problem_id).where(Job.id == job_id)).one_or_none()
    if row is None:
        raise NotFound("job", job_id)
    state, problem_id = row
    if not state.is_terminal:
        raise IllegalTransition(state.value, "deleted", "only a finished job can be deleted; cancel it first")
    terminal = [s for s in JobState if s.is_terminal]
    # Children go through ON DELETE CASCADE (SQLite enforces it: see store.db).
    stmt = delete(Job).where(Job.id == job_id, Job.state.in_(terminal)).returning(Job.id)
    if write_row(session, Job, job_id, stmt) is None:
        raise NotFound("job", job_id)  # a finished job only disappears by a concurrent delete
    orphan = (
        delete(StoredProblem)
        .where(
            StoredProblem.id == problem_id,
            StoredProblem.bundled_id.is_(None),
            ~exists().where(Job.problem_id == problem_id),
        )
        .returning(StoredProblem.id)
    )
    write_row(session, StoredProblem, problem_id, orphan)

