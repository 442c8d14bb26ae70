"""Attempts: every candidate a job evaluated, with its verdict; the job's best; dedup by source.

An attempt's key figures are copied out of the verdict JSON into columns when it is recorded, so
listings and best-attempt choice never parse JSON. Only a ``pass`` verdict can become a job's
(or a trajectory's) best; ``suspicious`` waits for its re-timing, recorded as a new attempt.
Among passes a timed one beats an untimed one, and a lower median time beats a higher; ties keep
the earlier attempt.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session, aliased

from store._sql import bump_counter, write_row
from store.errors import NotFound
from store.events import append_event
from store.models import Attempt, Job, Trajectory, utcnow
from store.pagination import DEFAULT_PAGE_SIZE, RowPage, check_limit, keyset_page
from vocabulary.events import AttemptPayload, EventType
from vocabulary.figures import AttemptFigures
from vocabulary.verdict import ErrorKind, Status, Verdict, source_sha256
from vocabulary.wire import finite_or_none

__all__ = [
    "fastest_verified_attempt",
    "find_attempt_by_source",
    "first_attempts",
    "get_attempt",
    "list_attempts",
    "record_attempt",
    "set_best_attempt",
    "source_sha256",
]


def _columns(figures: AttemptFigures) -> dict[str, Any]:
    """An attempt's figure columns: its figures, the stage as text (a new stage needs no migration)."""
    return {**vars(figures), "stage": figures.stage.value}


def _beats_current(best_id: InstrumentedAttribute[int | None], median_ms: float) -> ColumnElement[bool]:
    """SQL: the attempt timed ``median_ms`` is better than the row's current best ``best_id``."""
    current = aliased(Attempt)
    current_ms = select(current.median_ms).where(current.id == best_id).scalar_subquery()
    return or_(best_id.is_(None), current_ms.is_(None), current_ms > median_ms)


def _promote(session: Session, model: type[Job] | type[Trajectory], row_id: int, attempt: Attempt) -> bool:
    assert attempt.median_ms is not None
    stmt = (
        update(model)
        .where(model.id == row_id, _beats_current(model.best_attempt_id, attempt.median_ms))
        .values(best_attempt_id=attempt.id)
        .returning(model.id)
    )
    return write_row(session, model, row_id, stmt) is not None


def record_attempt(
    *,
    session: Session,
    job_id: int,
    trajectory_id: int | None,
    tool: str,
    source: str,
    parent_id: int | None,
    verdict: Verdict,
    now: datetime | None = None,
) -> Attempt:
    """Store one evaluated candidate, number it within its job, and promote it if it is the best.

    Also appends an ``attempt`` event. The job row stays locked until the caller commits
    (numbering goes through it), so concurrent trajectories of one job record one at a time.

    Args:
        verdict: the referee's verdict; stored whole as JSON (``to_dict()``), its key figures
            copied to columns.

    Raises:
        ValueError: the trajectory or parent belongs to another job.
        NotFound: no job with that id.
    """
    figures = AttemptFigures.of(verdict)
    now = now or utcnow()
    if trajectory_id is not None:
        owner = session.scalar(select(Trajectory.job_id).where(Trajectory.id == trajectory_id))
        if owner != job_id:
            raise ValueError(f"trajectory {trajectory_id} is not one of job {job_id}'s")
    if parent_id is not None:
        owner = session.scalar(select(Attempt.job_id).where(Attempt.id == parent_id))
        if owner != job_id:
            raise ValueError(f"attempt {parent_id} is not one of job {job_id}'s")
    n = bump_counter(session, Job, job_id, Job.attempts_count)
    attempt = Attempt(
        job_id=job_id,
        trajectory_id=trajectory_id,
        n=n,
        tool=tool,
        source=source,
        sha256=source_sha256(source),
        parent_id=parent_id,
        verdict=verdict.to_dict(),
        created_at=now,
        **_columns(figures),
    )
    session.add(attempt)
    session.flush()
    best = False
    # Only a verified kernel (a timed pass) can become the best; a non-finite time is no time.
    if verdict.is_verified and attempt.median_ms is not None:
        best = _promote(session, Job, job_id, attempt)
        if trajectory_id is not None:
            _promote(session, Trajectory, trajectory_id, attempt)
    eager_ms, compile_ms = verdict.baselines_ms
    payload = AttemptPayload(**vars(figures), n=n, attempt_id=attempt.id, trajectory_id=trajectory_id, tool=tool,
                             best=best, eager_ms=finite_or_none(eager_ms), compile_ms=finite_or_none(compile_ms))
    append_event(session=session, job_id=job_id, type=EventType.ATTEMPT, payload=payload.to_dict(), now=now)
    return attempt


def fastest_verified_attempt(*, session: Session, job_id: int, exclude: Collection[str] = ()) -> Attempt | None:
    """The job's fastest timed pass whose source is not in ``exclude`` (SHA-256 digests): what the
    worker re-judges in a fresh process before it calls one the job's best."""
    stmt = (select(Attempt)
            .where(Attempt.job_id == job_id, Attempt.status == Status.PASS, Attempt.median_ms.is_not(None))
            .order_by(Attempt.median_ms, Attempt.n))
    if exclude:
        stmt = stmt.where(Attempt.sha256.not_in(list(exclude)))
    return session.scalars(stmt.limit(1)).first()


def set_best_attempt(*, session: Session, job_id: int, attempt_id: int | None) -> None:
    """Make ``attempt_id`` the job's best (None: the job has none), whatever its time: the worker's
    re-judged kernel, which may time a little slower than the attempt it re-judged."""
    write_row(session, Job, job_id, update(Job).where(Job.id == job_id).values(best_attempt_id=attempt_id)
              .returning(Job.id))


def find_attempt_by_source(
    *,
    session: Session,
    job_id: int,
    sha256: str,
    tool: str | None = None,
    include_infra_errors: bool = False,
) -> Attempt | None:
    """The newest attempt of this job with this source digest (see `source_sha256`), if any.

    ``tool`` narrows it to one tool (a ``compile`` verdict does not answer ``benchmark``).
    Verdicts that judged nothing (``error_kind`` ``infra``: ours; ``cancelled``: cut short by the
    job's stop) are skipped by default: those are to be retried, not served again.
    """
    stmt = select(Attempt).where(Attempt.job_id == job_id, Attempt.sha256 == sha256)
    if tool is not None:
        stmt = stmt.where(Attempt.tool == tool)
    if not include_infra_errors:
        stmt = stmt.where(or_(Attempt.error_kind.is_(None),
                              Attempt.error_kind.not_in((ErrorKind.INFRA, ErrorKind.CANCELLED))))
    return session.scalars(stmt.order_by(Attempt.n.desc()).limit(1)).first()


def get_attempt(*, session: Session, job_id: int, n: int) -> Attempt:
    """Attempt number ``n`` (1-based) of a job, or NotFound."""
    attempt = session.scalars(select(Attempt).where(Attempt.job_id == job_id, Attempt.n == n)).first()
    if attempt is None:
        raise NotFound("attempt", f"{job_id}/{n}")
    return attempt


def list_attempts(
    *, session: Session, job_id: int, after_n: int = 0, limit: int = DEFAULT_PAGE_SIZE
) -> RowPage[Attempt]:
    """A job's attempts in order, numbers above ``after_n``; ``next_cursor`` is the next ``after_n``."""
    check_limit(limit)
    stmt = (
        select(Attempt)
        .where(Attempt.job_id == job_id, Attempt.n > after_n)
        .order_by(Attempt.n)
        .limit(limit + 1)
    )
    return keyset_page(list(session.scalars(stmt)), limit=limit, key=lambda a: a.n)


def first_attempts(*, session: Session, job_id: int, limit: int) -> list[Attempt]:
    """A job's first ``limit`` attempts in order, in one query (a whole job for a page, not an API page)."""
    stmt = select(Attempt).where(Attempt.job_id == job_id).order_by(Attempt.n).limit(limit)
    return list(session.scalars(stmt))
