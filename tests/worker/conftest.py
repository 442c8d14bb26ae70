"""Fixtures for the worker's tests: migrated SQLite files, throwaway PostgreSQL databases, Redis db 14.

PostgreSQL comes from ``KERNELLOOP_TEST_POSTGRES_URL`` (default: the local server as user
``postgres``), Redis from ``KERNELLOOP_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/14``,
flushed before and after each test that uses it). As in the store's tests, an unreachable server
fails the test: CI guarantees both.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from config import Settings
from store import make_engine, make_session_factory
from store.db import normalize_url
from store.migrate import upgrade
from tests.worker.support import make_settings

PG_URL_ENV = "KERNELLOOP_TEST_POSTGRES_URL"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
REDIS_URL_ENV = "KERNELLOOP_TEST_REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'kernelloop.db'}"
    upgrade(url)
    return url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A migrated PostgreSQL database private to the test, dropped afterwards."""
    base = normalize_url(os.environ.get(PG_URL_ENV) or DEFAULT_PG_URL)
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    name = f"kl_test_{secrets.token_hex(6)}"
    try:
        try:
            with admin.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        except OperationalError as exc:
            pytest.fail(f"PostgreSQL is unreachable (set {PG_URL_ENV}): {exc}", pytrace=False)
        url = base.set(database=name).render_as_string(hide_password=False)
        try:
            upgrade(url)
            yield url
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


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


def _factory(url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


@pytest.fixture
def sqlite_factory(sqlite_url: str) -> Iterator[sessionmaker[Session]]:
    yield from _factory(sqlite_url)


@pytest.fixture
def postgres_factory(postgres_url: str) -> Iterator[sessionmaker[Session]]:
    yield from _factory(postgres_url)


@pytest.fixture
def sqlite_settings(tmp_path: Path, sqlite_url: str, harness_cache: Path) -> Settings:
    return make_settings(data_dir=tmp_path, database_url=sqlite_url, cache_dir=harness_cache)
