"""Stored problem sources (one row per distinct source) and cached baselines."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from store._sql import insert_ignoring_conflicts
from store.errors import NotFound
from store.models import Baseline, StoredProblem, utcnow
from vocabulary.verdict import source_sha256
from vocabulary.wire import JsonObject, JsonValue

__all__ = ["get_baseline", "get_or_create_problem", "get_problem", "put_baseline"]


def get_or_create_problem(
    *,
    session: Session,
    source: str,
    declarations: Mapping[str, JsonValue],
    bundled_id: str | None = None,
    now: datetime | None = None,
) -> StoredProblem:
    """The row for this exact source, inserted if new (``INSERT … ON CONFLICT DO NOTHING``, so
    two jobs posting the same source at once share one row).

    Args:
        declarations: the parsed problem (``Problem.to_dict()`` without ``source``); stored with
            the first row only.
        bundled_id: the bundled id when the source is a bundled problem's.
    """
    digest = source_sha256(source)
    # Most jobs name a problem seen before (a bundled one): one SELECT, no source sent back.
    existing = session.scalars(select(StoredProblem).where(StoredProblem.sha256 == digest)).one_or_none()
    if existing is not None:
        return existing
    stmt = (
        insert_ignoring_conflicts(session, StoredProblem)
        .values(
            bundled_id=bundled_id,
            source=source,
            sha256=digest,
            declarations=dict(declarations),
            created_at=now or utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["sha256"])
    )
    session.execute(stmt)
    return session.scalars(select(StoredProblem).where(StoredProblem.sha256 == digest)).one()


def get_problem(*, session: Session, problem_id: int) -> StoredProblem:
    problem = session.get(StoredProblem, problem_id)
    if problem is None:
        raise NotFound("problem", problem_id)
    return problem


def get_baseline(
    *, session: Session, problem_sha256: str, device: str, provenance_key: str
) -> Baseline | None:
    """The cached baselines of a problem on a device under one provenance, if measured."""
    stmt = select(Baseline).where(
        Baseline.problem_sha256 == problem_sha256,
        Baseline.device == device,
        Baseline.provenance_key == provenance_key,
    )
    return session.scalars(stmt).first()


def put_baseline(
    *,
    session: Session,
    problem_sha256: str,
    device: str,
    provenance_key: str,
    eager_ms: float | None,
    compile_ms: float | None,
    provenance: JsonObject,
    now: datetime | None = None,
) -> Baseline:
    """Store (or replace) the baselines of a problem on a device under one provenance."""
    stmt = insert_ignoring_conflicts(session, Baseline).values(
        problem_sha256=problem_sha256,
        device=device,
        provenance_key=provenance_key,
        eager_ms=eager_ms,
        compile_ms=compile_ms,
        provenance=provenance,
        created_at=now or utcnow(),
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=["problem_sha256", "device", "provenance_key"],
        set_={
            "eager_ms": stmt.excluded.eager_ms,
            "compile_ms": stmt.excluded.compile_ms,
            "provenance": stmt.excluded.provenance,
            "created_at": stmt.excluded.created_at,
        },
    )
    session.execute(stmt.execution_options(synchronize_session=False))
    written = select(Baseline).where(
        Baseline.problem_sha256 == problem_sha256,
        Baseline.device == device,
        Baseline.provenance_key == provenance_key,
    )
    # populate_existing: a copy loaded before the upsert must show the new figures.
    return session.scalars(written.execution_options(populate_existing=True)).one()
