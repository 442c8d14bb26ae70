"""Fixtures for the command-line tests: the live API of `tests.support.dashboard` (no worker: tests
write attempts into the store) and a real ``kernelloop up`` (`tests.support.cli`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import Embedded, kernelloop_up
from tests.support.dashboard import Service, live_service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with live_service(tmp_path / "service") as running:
        yield running


@pytest.fixture
def embedded(tmp_path: Path, harness_cache: Path) -> Iterator[Embedded]:
    """``kernelloop up --target cpu`` (see `tests.support.cli.kernelloop_up`)."""
    with kernelloop_up(tmp_path, harness_cache, "cpu") as running:
        yield running
