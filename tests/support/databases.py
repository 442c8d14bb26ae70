"""Databases for the tests (a pytest plugin, registered by tests/conftest.py): throwaway SQLite
files and PostgreSQL databases, migrated once per session and emptied after each test, and Redis.

PostgreSQL comes from ``KERNELLOOP_TEST_POSTGRES_URL`` (default: the local server's ``postgres``
database as user ``postgres``). Each test session creates its own ``kl_test_<random>`` database
through it and drops it at the end. When the server cannot be reached the PostgreSQL tests fail:
CI guarantees a server, so a missing one is a broken environment, not a reason to skip.

Redis comes from ``KERNELLOOP_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/14``, flushed
before and after each test that uses ``redis_url``); unreachable, it fails the test too. Under
pytest-xdist each worker has databases of its own (`redis_db`), so one worker's flush never empties
another's queue.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from store import Base, make_engine, make_session_factory
from store.db import normalize_url
from store.migrate import upgrade

PG_URL_ENV = "KERNELLOOP_TEST_POSTGRES_URL"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
BACKENDS = ("sqlite", "postgresql")
REDIS_URL_ENV = "KERNELLOOP_TEST_REDIS_URL"
#: Redis databases a pytest-xdist worker moves down by (Redis has 16: four workers at most).
REDIS_DBS_PER_WORKER = 4


def redis_db(db: int) -> int:
    """Database ``db`` of this test process: as given in a plain run, moved down by
    `REDIS_DBS_PER_WORKER` for each pytest-xdist worker before this one (``gw1`` uses 10 for 14)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    moved = db - REDIS_DBS_PER_WORKER * int(worker.removeprefix("gw"))
    if moved < 0:
        raise RuntimeError(f"Redis has no database {moved} for worker {worker}: run at most four workers")
    return moved


DEFAULT_REDIS_URL = f"redis://127.0.0.1:6379/{redis_db(14)}"


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """A fresh, empty PostgreSQL database's URL; dropped (connections and all) afterwards."""
    base = normalize_url(os.environ.get(PG_URL_ENV) or DEFAULT_PG_URL)
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    name = f"kl_test_{secrets.token_hex(6)}"
    try:
        try:
            with admin.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        except OperationalError as exc:
            pytest.fail(
                f"PostgreSQL is unreachable at {base.render_as_string(hide_password=True)} "
                f"(set {PG_URL_ENV}); CI guarantees a server, so this is an error: {exc}",
                pytrace=False,
            )
        try:
            yield base.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def sqlite_url_in(directory: Path) -> str:
    return f"sqlite:///{directory / 'kernelloop.db'}"


@pytest.fixture
def fresh_postgres_url() -> Iterator[str]:
    """An empty PostgreSQL database private to the test."""
    with throwaway_postgres() as url:
        yield url


@pytest.fixture(scope="session")
def migrated_sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = sqlite_url_in(tmp_path_factory.mktemp("sqlite"))
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def migrated_postgresql_url() -> Iterator[str]:
    with throwaway_postgres() as url:
        upgrade(url)
        yield url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest) -> str:
    """A migrated database of the current backend (shared by the session, emptied after each test)."""
    return str(request.getfixturevalue(f"migrated_{backend}_url"))


def _empty_all_tables(factory: sessionmaker[Session]) -> None:
    tables = Base.metadata.sorted_tables
    with factory() as session:
        if session.get_bind().dialect.name == "postgresql":
            names = ", ".join(t.name for t in tables)
            session.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
        else:
            for table in reversed(tables):
                session.execute(table.delete())
        session.commit()


@pytest.fixture
def factory(db_url: str) -> Iterator[sessionmaker[Session]]:
    """A session factory on the backend's database; every table is emptied afterwards."""
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    try:
        yield factory
    finally:
        _empty_all_tables(factory)
        engine.dispose()


@pytest.fixture
def session(factory: sessionmaker[Session]) -> Iterator[Session]:
    with factory() as session:
        yield session
        session.rollback()


@pytest.fixture
def redis_url() -> Iterator[str]:
    """Redis database 14, empty before and after the test."""
    import redis

    url = os.environ.get(REDIS_URL_ENV) or DEFAULT_REDIS_URL
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is unreachable at {url} (set {REDIS_URL_ENV}): {exc}", pytrace=False)
    try:
        yield url
    finally:
        client.flushdb()
        client.close()
