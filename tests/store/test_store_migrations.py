"""The Alembic history: up, down and up again on both backends, ending equal to the models."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from store import Base, make_engine
from store.migrate import current_revision, downgrade, upgrade
from tests.support.databases import sqlite_url_in
from tests.support.paths import REPO

MODEL_TABLES = {t.name for t in Base.metadata.sorted_tables}


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of each backend, private to the test."""
    if request.param == "sqlite":
        return sqlite_url_in(tmp_path)
    return str(request.getfixturevalue("fresh_postgres_url"))


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _schema_diff(url: str) -> list[object]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade_matches_models(empty_url: str) -> None:
    assert current_revision(empty_url) is None

    upgrade(empty_url)
    head = current_revision(empty_url)
    assert head is not None
    assert _tables(empty_url) == MODEL_TABLES
    assert _schema_diff(empty_url) == []

    downgrade(empty_url, "base")
    assert current_revision(empty_url) is None
    assert _tables(empty_url) == set()

    upgrade(empty_url)
    assert current_revision(empty_url) == head
    assert _schema_diff(empty_url) == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_circular_foreign_keys_exist(backend: str, request: pytest.FixtureRequest) -> None:
    # jobs/trajectories.best_attempt_id point at attempts, which points back: on PostgreSQL they
    # are added once attempts exists, on SQLite written inline.
    url = str(request.getfixturevalue(f"migrated_{backend}_url"))
    engine = make_engine(url)
    try:
        inspector = inspect(engine)
        for table in ("jobs", "trajectories"):
            keys = {fk["name"]: fk for fk in inspector.get_foreign_keys(table)}
            key = keys[f"fk_{table}_best_attempt_id_attempts"]
            assert key["referred_table"] == "attempts"
            assert key["options"].get("ondelete") == "SET NULL"
    finally:
        engine.dispose()


def test_alembic_ini_takes_the_url_from_x_argument(tmp_path: Path) -> None:
    url = sqlite_url_in(tmp_path)
    config = Config(str(REPO / "alembic.ini"), cmd_opts=argparse.Namespace(x=[f"url={url}"]))
    command.upgrade(config, "head")
    assert _tables(url) == MODEL_TABLES


def test_alembic_ini_takes_the_url_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = sqlite_url_in(tmp_path)
    monkeypatch.setenv("KERNELLOOP_DATABASE_URL", url)
    command.upgrade(Config(str(REPO / "alembic.ini")), "head")
    assert _tables(url) == MODEL_TABLES
