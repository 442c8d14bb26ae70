"""Shared fixtures: one harness cache per test session, so a build serves every test using it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="session")
def harness_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory shared by the whole session (KERNELLOOP_TEST_CACHE keeps it across runs)."""
    kept = os.environ.get("KERNELLOOP_TEST_CACHE")
    if kept:
        path = Path(kept)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("harness-cache")
