"""Fixtures for the store's tests: the builders of `tests.support.store` on the test's session; the
databases (``db_url``, ``factory``, ``session``...) are the fixtures of `tests.support.databases`."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from tests.support.store import Builders


@pytest.fixture
def build(session: Session) -> Builders:
    return Builders(session)


@pytest.fixture
def builders() -> type[Builders]:
    """The builder class, for tests that open their own sessions."""
    return Builders
