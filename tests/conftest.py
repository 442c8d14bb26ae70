"""Shared fixtures: one harness cache per test session, so a build serves every test using it."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

#: Database fixtures (SQLite, PostgreSQL, Redis) shared by the store, API, worker and tenancy tests.
#: Builders and helpers are modules of `tests.support` (its docstring says which holds what).
#: Only where the service's packages are installed: a GPU host runs ``pytest -m gpu tests/gpu`` with
#: torch alone (elsewhere a test that needs a database fails for want of its fixture, never skips).
pytest_plugins = ["tests.support.databases"] if importlib.util.find_spec("sqlalchemy") else []

# One OpenMP thread per sandbox (the variable is on the harness's environment allowlist):
# on a 2-core CI machine shared with other jobs, OpenMP barriers waiting for a descheduled thread
# make CPU timings swing by 10-100x, and a baseline timed in such a moment would quarantine a
# legit candidate as "suspicious". Baselines are cached per thread count.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def harness_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory shared by the whole session, pytest-xdist's workers included (the cache
    locks what it builds, so a build one worker started serves the others); KERNELLOOP_TEST_CACHE
    keeps it across runs."""
    kept = os.environ.get("KERNELLOOP_TEST_CACHE")
    if kept:
        path = Path(kept)
    elif "PYTEST_XDIST_WORKER" in os.environ:
        path = tmp_path_factory.getbasetemp().parent / "harness-cache"  # the run's, above each worker's
    else:
        return tmp_path_factory.mktemp("harness-cache")
    path.mkdir(parents=True, exist_ok=True)
    return path
