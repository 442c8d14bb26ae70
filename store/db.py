"""Engines and sessions from a URL. Nothing here is global: callers keep what they build.

Unit of work: the store's data-access functions take a `Session`, may ``flush()`` it (to get
ids, or to run guarded ``UPDATE``s), and never commit or roll back. The caller owns the
transaction, normally through `session_scope`, and commits once what it did is complete::

    factory = make_session_factory(make_engine(url))
    with session_scope(factory) as session:
        job = claim_next_job(session=session, worker_id="gpu0", target=Target.CUDA, lease_seconds=60)
    # committed here: the claim is visible to others and the job row's lock is released

Functions that bump a per-job counter (events, attempts) lock the job row until that commit on
PostgreSQL (and SQLite serialises all writers anyway), so keep such transactions short: commit
before calling the LLM or the harness, not after.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from store._sql import dumps_json

__all__ = ["SQLITE_BUSY_TIMEOUT_MS", "make_engine", "make_session_factory", "normalize_url", "session_scope"]

#: How long a SQLite writer waits for another's lock before failing. Generous, because a worker
#: and the API share one file in the embedded mode and a waiting writer is not an error.
SQLITE_BUSY_TIMEOUT_MS = 30_000


def normalize_url(url: str | URL) -> URL:
    """Parse a URL, choosing psycopg 3 for a bare ``postgresql://`` (psycopg2 is not a dependency)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _sqlite_pragmas(*, foreign_keys: bool) -> Any:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            # WAL: readers (the API) never block the writer (the worker) nor the other way round.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
            # Durable enough under WAL (a power cut may lose the last commits, never corrupt).
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    return on_connect


def make_engine(
    url: str | URL, *, echo: bool = False, sqlite_foreign_keys: bool = True, pool_size: int | None = None
) -> Engine:
    """An engine for the service's database.

    Args:
        url: a SQLAlchemy URL, ``sqlite:///path`` or ``postgresql+psycopg://…``.
        echo: log every statement.
        sqlite_foreign_keys: enforce foreign keys on SQLite (on PostgreSQL they always are).
            Only migrations turn it off: batch mode rebuilds tables, and dropping the old copy of
            a referenced table with enforcement on would cascade.
        pool_size: connections kept open, and the most ever open (no overflow): for a process
            with that many threads using the database at once. ``None``: SQLAlchemy's default
            (5 kept, 10 more opened and closed as needed), enough for a worker.

    Returns:
        A new engine; the caller disposes of it.
    """
    parsed = normalize_url(url)
    pool: dict[str, int] = {} if pool_size is None else {"pool_size": pool_size, "max_overflow": 0}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            # One shared connection, or every session would see its own empty database.
            engine = create_engine(parsed, echo=echo, json_serializer=dumps_json, poolclass=StaticPool,
                                   connect_args={"check_same_thread": False})
        else:
            engine = create_engine(parsed, echo=echo, json_serializer=dumps_json, **pool)
        event.listen(engine, "connect", _sqlite_pragmas(foreign_keys=sqlite_foreign_keys))
        return engine
    return create_engine(parsed, echo=echo, json_serializer=dumps_json, pool_pre_ping=True, **pool)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine``.

    ``expire_on_commit=False``: rows returned by a committed `session_scope` stay readable after
    it closes (a worker passes them on); re-fetch by id for fresh values.
    """
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit if the block succeeds, roll back if it raises, close either way."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
