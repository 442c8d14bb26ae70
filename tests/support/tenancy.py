"""The tenancy tests' service on this machine: the real API (SQLite in a private data directory)
and an embedded worker run in-process, with a private harness cache where the tests plant other
tenants' files for hostile problems to look for (the ``service`` fixture of tests/tenancy builds
it); the honest parts of their problems and candidates."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from config import Settings
from harness import HarnessOptions, TimingOptions
from store import Target, events_after, get_job, list_attempts
from store import session_scope as scope
from worker.embedded import EmbeddedWorker

#: A candidate with no extension: its compile sandbox only imports it (no C++ build in these tests).
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
