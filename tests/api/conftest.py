"""Fixtures for the API's tests: the app on a real database (SQLite file or a throwaway
PostgreSQL database, migrated), a `RecordingDispatcher`, and API keys (`tests.support.api`).

The databases (``db_url`` over SQLite and PostgreSQL, ``factory``) are the fixtures of
`tests.support.databases`: when PostgreSQL cannot be reached the tests fail, never skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api import create_app
from config import Settings
from tests.support.api import TEST_STREAM_OPTIONS, Key, Keys, RecordingDispatcher, make_settings


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return make_settings(db_url, tmp_path)


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def client(
    settings: Settings, dispatcher: RecordingDispatcher, factory: sessionmaker[Session]
) -> Iterator[TestClient]:
    """The app, started (lifespan) and stopped around the test."""
    app = create_app(settings, dispatcher=dispatcher, stream_options=TEST_STREAM_OPTIONS)
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def keys(factory: sessionmaker[Session]) -> Keys:
    return Keys(factory)


@pytest.fixture
def alice(keys: Keys) -> Key:
    return keys.create("alice")
