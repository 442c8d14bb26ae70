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

# One OpenMP thread per sandboxed stage (the variable is on the harness's environment allowlist):
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


#: The heaviest files of `make test`: seconds their tests took under three workers on the 2-core
#: machine (CI's run of 2026-12-05 and a fresh clone's; benchmarks/results/test_suite_dev2core.md).
#: They are handed out first, so the workers end together: pytest-xdist's default order
#: (``--dist loadfile`` sorts files by their number of tests) left these one-test files for last,
#: run side by side or alone while the other workers sat idle. The Makefile passes
#: ``--no-loadscope-reorder`` so that the order set here stands.
HEAVY_FILES = {
    "tests/harness/test_load_inline_styles.py": 260,
    "tests/worker/test_model_runs.py": 260,
    "tests/harness/corpus/test_corpus_cpu.py": 215,
    "tests/problems/test_kernelbench_forms.py": 205,
    "tests/harness/integrity/test_integrity_cpu.py": 200,
    "tests/cli/test_optimize_json.py": 135,
    "tests/cli/test_optimize_tty.py": 130,
    "tests/cli/test_replay.py": 125,
    "tests/cli/test_end_to_end.py": 125,
    "tests/examples/test_level1_cpu.py": 110,
    "tests/harness/test_trusted_builds.py": 110,
    "tests/harness/test_patchsource.py": 95,
    "tests/cli/test_optimize_cancel.py": 95,
    "tests/cli/test_cli.py": 90,
    "tests/agent/test_real_harness_cpu.py": 100,
    "tests/worker/test_embedded.py": 60,
    "tests/harness/test_baseline_record.py": 55,
}
#: A file with a test marked ``slow`` that the table does not name.
_SLOW_FILE_S = 30


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heaviest files first, each file's tests kept together and in their order."""
    weight: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        slow = _SLOW_FILE_S if item.get_closest_marker("slow") is not None else 0
        weight[path] = max(weight.get(path, 0), HEAVY_FILES.get(path, slow))
    items.sort(key=lambda item: -weight[item.nodeid.split("::", 1)[0]])  # stable: files stay whole
