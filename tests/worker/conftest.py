"""Fixtures for the worker's tests: migrated SQLite files, throwaway PostgreSQL databases
(`tests.databases`), Redis db 14.

Redis comes from ``KERNELLOOP_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/14``,
flushed before and after each test that uses it). As in the store's tests, an unreachable server
fails the test: CI guarantees both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from config import Settings
from store import make_engine, make_session_factory
from store.migrate import upgrade
from tests.databases import sqlite_url_in, throwaway_postgres
from tests.worker.support import make_settings

REDIS_URL_ENV = "KERNELLOOP_TEST_REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    url = sqlite_url_in(tmp_path)
    upgrade(url)
    return url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A migrated PostgreSQL database private to the test, dropped afterwards."""
    with throwaway_postgres() as url:
        upgrade(url)
        yield url


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
