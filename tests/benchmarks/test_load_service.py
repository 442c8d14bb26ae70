"""The load run's script (benchmarks/load_service.py) on a few jobs: each setup starts, serves,
streams, is checked against the store and stops; and the figures it derives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.load_double import EVENTS_PER_JOB
from benchmarks.load_service import (
    DEFAULT_PG_URL,
    LoadConfig,
    SetupResult,
    percentile,
    render_markdown,
    run_setup,
)
from tests.support.databases import redis_db

#: Not the script's database 13 (a load run may be going on) nor the worker tests' 14.
REDIS_URL = f"redis://127.0.0.1:6379/{redis_db(12)}"


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0 and percentile(values, 100) == 100.0
    assert percentile([3.0], 99) == 3.0 and percentile([], 50) is None


def test_the_config_refuses_a_run_it_cannot_do() -> None:
    with pytest.raises(ValueError):
        LoadConfig(jobs=10, watchers=11)
    with pytest.raises(ValueError):
        LoadConfig(body="agent")
    with pytest.raises(ValueError):
        LoadConfig(keys=0)
    with pytest.raises(ValueError):
        LoadConfig(api_workers=0)
    with pytest.raises(ValueError):
        LoadConfig(submitters=0)
    with pytest.raises(ValueError):
        LoadConfig(settings=(("api-port", "1"),))


def test_the_submission_target_applies_to_the_distributed_setup_only() -> None:
    def result(setup: str) -> SetupResult:
        return SetupResult(setup=setup, config=LoadConfig(jobs=2, watchers=1), submit_s=[0.4, 0.5], lag_s=[0.1])

    assert "p99 submission < 250 ms" not in result("embedded").passed
    assert result("distributed").passed["p99 submission < 250 ms"] is False


@pytest.mark.slow
@pytest.mark.parametrize(("setup", "api_workers"), [("embedded", 1), ("distributed", 2)])
def test_a_small_load_run_sees_every_event_of_every_watched_job(setup: str, api_workers: int, tmp_path: Path) -> None:
    """Behaviour only (no timing target: this machine is shared): every submission answered, every
    job run, every watcher got exactly the stored events in order. The distributed run has two API
    processes, so a stream may be served by another process than the one that took its job."""
    config = LoadConfig(jobs=8, watchers=4, workers=1, keys=2, deadline_s=240.0, api_workers=api_workers)
    result = run_setup(setup, config, postgres_url=os.environ.get("KERNELLOOP_TEST_POSTGRES_URL") or DEFAULT_PG_URL,
                       redis_url=REDIS_URL, keep_logs=tmp_path)
    assert result.errors == [], result.errors
    assert result.reconnects == [], result.reconnects
    assert result.jobs_by_state == {"succeeded": 8}
    assert len(result.submit_s) == 8
    assert result.watchers_complete == result.watchers_in_order == 4
    assert result.events_received == result.events_expected == 4 * EVENTS_PER_JOB
    assert len(result.lag_s) == 4 * EVENTS_PER_JOB
    assert set(result.cpu_s) == {"api", "worker0", "client"}
    # Where each submission's time went, from its answer's Server-Timing header.
    assert len(result.server_timing_ms) == 8
    assert all({"app", "queue", "store", "locks", "announce", "outside"} <= set(t) for t in result.server_timing_ms)
    if setup == "distributed":
        assert sum(result.submissions_per_transaction) == 8 and len(result.api_cpu_by_process_s) == api_workers
    markdown = render_markdown([[result]], note="a note")
    assert f"| | {setup} |" in markdown and "| submission p99" in markdown and "a note" in markdown
    assert (tmp_path / f"{setup}-api.log").exists()
