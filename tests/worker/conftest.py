"""Fixtures for the worker's tests: migrated SQLite files and throwaway PostgreSQL databases
private to each test, and settings for them (``redis_url``, Redis db 14, is a fixture of
`tests.support.databases`). As in the store's tests, an unreachable server fails the test: CI
guarantees both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from config import Settings
from store import make_engine, make_session_factory
from store.migrate import upgrade
from tests.support.databases import sqlite_url_in, throwaway_postgres
from tests.support.worker import make_settings


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
def sqlite_factory(sqlite_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(sqlite_url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


@pytest.fixture
def postgres_factory(postgres_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(postgres_url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


@pytest.fixture
def sqlite_settings(tmp_path: Path, sqlite_url: str, harness_cache: Path) -> Settings:
    return make_settings(data_dir=tmp_path, database_url=sqlite_url, cache_dir=harness_cache)
