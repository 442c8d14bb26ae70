"""Fixtures for the store's tests: throwaway SQLite files and PostgreSQL databases.

PostgreSQL comes from ``KERNELLOOP_TEST_POSTGRES_URL`` (default: the local server's ``postgres``
database as user ``postgres``). Each test session creates its own ``kl_test_<random>`` database
through it and drops it at the end. When the server cannot be reached the PostgreSQL tests fail:
CI guarantees a server, so a missing one is a broken environment, not a reason to skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from harness.verdict import Baselines, CompileResult, ErrorKind, Stage, Status, Timing, Trial, Verdict
from store import (
    Base,
    Job,
    StoredProblem,
    Target,
    create_job,
    get_or_create_problem,
    make_engine,
    make_session_factory,
)
from store.db import normalize_url
from store.migrate import upgrade

PG_URL_ENV = "KERNELLOOP_TEST_POSTGRES_URL"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
BACKENDS = ("sqlite", "postgresql")


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


def sqlite_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'kernelloop.db'}"


@pytest.fixture
def fresh_postgres_url() -> Iterator[str]:
    """An empty PostgreSQL database private to the test."""
    with throwaway_postgres() as url:
        yield url


@pytest.fixture(scope="session")
def migrated_sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = sqlite_url(tmp_path_factory.mktemp("sqlite"))
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


# -- builders ------------------------------------------------------------------------------------

PROBLEM_SOURCE = """
import torch
from torch import nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
"""


class Builders:
    """Rows and verdicts for tests, on one session (nothing committed unless a test commits)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def problem(self, source: str = PROBLEM_SOURCE, bundled_id: str | None = None) -> StoredProblem:
        return get_or_create_problem(
            session=self.session, source=source, declarations={"mode": "train"}, bundled_id=bundled_id
        )

    def job(self, *, target: Target = Target.CPU, owner_id: int | None = None, **kwargs: Any) -> Job:
        problem_id = kwargs.pop("problem_id", None) or self.problem().id
        return create_job(
            session=self.session,
            problem_id=problem_id,
            target=target,
            owner_id=owner_id,
            llm_profile="replay",
            llm_model="script",
            budgets={"turns": 10, "tool_calls": 30},
            **kwargs,
        )

    @staticmethod
    def verdict(
        status: Status = Status.PASS,
        *,
        median_ms: float | None = 1.0,
        eager_ms: float = 4.0,
        compile_ms: float = 2.0,
        correct: bool = True,
        stage: Stage = Stage.DONE,
        error_kind: ErrorKind | None = None,
    ) -> Verdict:
        """A real `Verdict`; timing samples spread around ``median_ms``."""

        def timing(ms: float) -> Timing:
            return Timing.from_samples([ms * 0.99, ms, ms, ms * 1.01, ms * 1.02], clock="perf_counter")

        return Verdict(
            status=status,
            stage=stage,
            error_kind=error_kind,
            message="" if status is Status.PASS else f"{status.value} at {stage.value}",
            compile=CompileResult(ok=True, seconds=3.5, kernels=({"kernel": "k", "registers": 32},)),
            trials=tuple(
                Trial(seed_index=i, passed=correct, max_abs_err=1e-6, mean_abs_err=1e-7, mismatch_frac=0.0)
                for i in range(3)
            ),
            timing=timing(median_ms) if median_ms is not None else None,
            baselines=Baselines(eager=timing(eager_ms), compiled=timing(compile_ms)),
            sol_ms=0.25,
            flags=("suspicious_speedup",) if status is Status.SUSPICIOUS else (),
            provenance={"device": "cpu", "torch": "2.13.0", "harness": "0.1.0"},
        )


@pytest.fixture
def build(session: Session) -> Builders:
    return Builders(session)


@pytest.fixture
def builders() -> type[Builders]:
    """The builder class, for tests that open their own sessions."""
    return Builders
