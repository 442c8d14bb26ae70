"""A service on this machine for the tenancy tests: the real API (SQLite in a private data
directory) and an embedded worker run in-process, with a private harness cache where the tests
plant other tenants' files for hostile problems to look for.

The service's working directory is a private folder holding a plaintext API key, as a user who
started ``kernelloop up`` beside one would have it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api import create_app
from config import Settings
from harness import HarnessOptions, Timeouts, TimingOptions
from store import Target, create_api_key, events_after, get_job, list_attempts, make_engine, make_session_factory
from store import session_scope as scope
from store.migrate import upgrade
from tests.databases import sqlite_url_in
from worker.embedded import EmbeddedWorker
from worker.runner import harness_options_for

#: A candidate with no extension: its compile stage only imports it (no C++ build in these tests).
CANDIDATE = """
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2
"""
#: The honest part of every problem here (appended after the hostile module code, or changed).
PROBLEM_TAIL = """
class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
"""
MEMORY_LIMIT_MB = 3072
QUICK_TIMING = TimingOptions(warmup_ms=5, min_repeats=5, max_time_s=0.2, input_sets=2)


@dataclass
class Service:
    """The API client, an admin-less key, the settings, and how to run queued jobs."""

    client: TestClient
    settings: Settings
    headers: dict[str, str]
    factory: Any
    options: HarnessOptions
    workdir: Path
    api_key_file: Path
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def cache(self) -> Path:
        return self.options.cache_dir

    def post_evaluation(self, problem_source: str, candidate: str = CANDIDATE) -> int:
        response = self.client.post("/evaluations", headers=self.headers, json={
            "problem_source": problem_source, "candidate_source": candidate, "target": "cpu"})
        assert response.status_code == 202, response.text
        return int(response.json()["id"])

    def worker(self, **option_changes: Any) -> EmbeddedWorker:
        return EmbeddedWorker(settings=self.settings, session_factory=self.factory, target=Target.CPU,
                              harness_options=self.options.replace(**option_changes), reap=False)

    def run_next(self, **option_changes: Any) -> float:
        """Run the oldest queued job to its end; returns the seconds it took."""
        started = time.monotonic()
        assert self.worker(**option_changes).run_once() is not None, "no job was queued"
        return time.monotonic() - started

    def run_in_background(self, **option_changes: Any) -> threading.Thread:
        thread = threading.Thread(target=self.worker(**option_changes).run_once, daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def job(self, job_id: int) -> dict[str, Any]:
        response = self.client.get(f"/jobs/{job_id}", headers=self.headers)
        assert response.status_code == 200, response.text
        return response.json()

    def attempts(self, job_id: int) -> list[dict[str, Any]]:
        with scope(self.factory) as session:
            return [dict(a.verdict) for a in list_attempts(session=session, job_id=job_id, limit=100).items]

    def events(self, job_id: int) -> list[tuple[str, dict[str, Any]]]:
        with scope(self.factory) as session:
            return [(str(e.type), dict(e.payload or {}))
                    for e in events_after(session=session, job_id=job_id, after_id=0, limit=500)]

    def state(self, job_id: int) -> str:
        with scope(self.factory) as session:
            return get_job(session=session, job_id=job_id).state.value


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    url = sqlite_url_in(data_dir)
    upgrade(url)
    settings = Settings(_env_file=None, database_url=url, data_dir=data_dir,  # type: ignore[call-arg]
                        cache_dir=tmp_path / "cache", warm_headers=False, lease_seconds=30.0,
                        heartbeat_seconds=5.0, default_target="cpu")
    # Where `kernelloop up` was started: a plaintext key beside it.
    workdir = tmp_path / "service-cwd"
    workdir.mkdir()
    api_key_file = workdir / "api-key.txt"
    api_key_file.write_text("kl_live_PLAINTEXT_KEY_OF_THE_OPERATOR\n")
    monkeypatch.chdir(workdir)
    engine = make_engine(url)
    factory = make_session_factory(engine)
    with scope(factory) as session:
        issued = create_api_key(session=session, name="tenant-a", owner="tenant-a", max_concurrent_jobs=50,
                                max_jobs_per_day=500)
        headers = {"X-API-Key": issued.plaintext}
    options = harness_options_for(settings).replace(
        # No precompiled header: these candidates build nothing, and a private cache would build one.
        compile_baseline=False, pch=False, trials=2, timing=QUICK_TIMING, memory_limit_mb=MEMORY_LIMIT_MB,
        timeouts=Timeouts(trial_s=20.0, load_s=90.0, timing_s=60.0, compile_s=300.0, reference_start_s=90.0,
                          baselines_s=120.0))
    app = create_app(settings)
    with TestClient(app) as client:
        svc = Service(client=client, settings=settings, headers=headers, factory=factory, options=options,
                      workdir=workdir, api_key_file=api_key_file)
        yield svc
        for thread in svc.threads:
            thread.join(timeout=60)
    engine.dispose()


def stage_processes(root_pid: int | None = None, role: str | None = None) -> list[int]:
    """Live sandbox processes (wardens and roles; only ``role``'s stage when given) descending
    from ``root_pid`` (default: us)."""
    root_pid = root_pid or os.getpid()
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                commands[int(entry)] = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            commands.pop(int(entry), None)

    def descends(pid: int) -> bool:
        seen = set()
        while pid in parents and pid not in seen:
            if parents[pid] == root_pid:
                return True
            seen.add(pid)
            pid = parents[pid]
        return False

    wanted = (f"harness.roles {role} ",) if role else ("harness.roles", "warden.py")
    return [pid for pid, cmd in commands.items() if any(w in cmd for w in wanted) and descends(pid)]


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                zombie = fh.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker in cmd and not zombie:
            found.append(int(entry))
    return found
