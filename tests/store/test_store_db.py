"""Engines, sessions and column types; the package's public surface."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import StatementError
from sqlalchemy.orm import Session, sessionmaker

import store
from store import Attempt, Job, get_baseline, make_engine, put_baseline, session_scope
from store._sql import dumps_json
from store.db import SQLITE_BUSY_TIMEOUT_MS, normalize_url
from vocabulary.verdict import Verdict


def test_sqlite_connections_get_wal_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == SQLITE_BUSY_TIMEOUT_MS
    finally:
        engine.dispose()


def test_a_bare_postgresql_url_uses_psycopg_3() -> None:
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"


def test_session_scope_commits_or_rolls_back(factory: sessionmaker[Session], builders: Any) -> None:
    with session_scope(factory) as session:
        problem_id = builders(session).problem().id
    with pytest.raises(RuntimeError), session_scope(factory) as session:
        builders(session).job(problem_id=problem_id)
        raise RuntimeError("boom")
    with session_scope(factory) as session:
        assert session.query(Job).count() == 0
        assert builders(session).problem().id == problem_id


def test_timestamps_are_utc_aware_and_naive_ones_refused(session: Session, build: Any) -> None:
    plus_two = timezone(timedelta(hours=2))
    local = datetime(2026, 3, 1, 14, 0, tzinfo=plus_two)
    job = build.job(now=local)
    session.commit()
    session.expire_all()
    stored = session.get(Job, job.id)
    assert stored is not None
    assert stored.created_at == local and stored.created_at.utcoffset() == timedelta(0)
    assert stored.created_at.hour == 12

    stored.started_at = datetime(2026, 3, 1, 12, 0)  # naive
    with pytest.raises(StatementError, match="naive datetime"):
        session.flush()
    session.rollback()


def test_non_finite_numbers_become_null_in_json(session: Session, build: Any) -> None:
    assert dumps_json({"a": [1.0, math.nan, math.inf], "b": {"c": -math.inf}}) == (
        '{"a": [1.0, null, null], "b": {"c": null}}'
    )
    job = build.job()
    verdict = build.verdict().to_dict()
    verdict["timing"]["samples_ms"].append(math.nan)
    verdict["sol_ms"] = math.inf
    attempt = store.record_attempt(
        session=session,
        job_id=job.id,
        trajectory_id=None,
        tool="benchmark",
        source="s",
        parent_id=None,
        verdict=Verdict.from_dict(verdict),
    )
    session.commit()
    session.expire_all()
    stored = session.get(Attempt, attempt.id)
    assert stored is not None
    assert stored.verdict["sol_ms"] is None and stored.verdict["timing"]["samples_ms"][-1] is None


def test_baselines_upsert(session: Session) -> None:
    key: dict[str, Any] = {"problem_sha256": "ab" * 32, "device": "NVIDIA H200", "provenance_key": "tc13"}
    assert get_baseline(session=session, **key) is None
    first = put_baseline(session=session, eager_ms=8.49, compile_ms=6.06, provenance={"tf32": False}, **key)
    second = put_baseline(session=session, eager_ms=8.40, compile_ms=None, provenance={"tf32": False}, **key)
    session.commit()
    assert first.id == second.id
    found = get_baseline(session=session, **key)
    assert found is not None and (found.eager_ms, found.compile_ms) == (8.40, None)


def test_same_source_is_one_problem_row(session: Session, build: Any) -> None:
    assert build.problem().id == build.problem().id
    assert build.problem(source="other").id != build.problem().id


def test_public_surface_is_pinned() -> None:
    assert sorted(store.__all__) == sorted(set(store.__all__))
    for name in store.__all__:
        assert hasattr(store, name), name
    for must in (
        "create_job",
        "claim_next_job",
        "heartbeat",
        "reap_expired_leases",
        "append_event",
        "events_after",
        "job_heads",
        "read_store_counts",
        "record_attempt",
        "find_attempt_by_source",
        "create_api_key",
        "verify_api_key",
        "delete_job",
        "session_scope",
        "make_engine",
        "JobState",
        "transition",
    ):
        assert must in store.__all__
