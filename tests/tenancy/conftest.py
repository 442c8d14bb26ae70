"""The ``service`` fixture of the tenancy tests (`tests.support.tenancy.Service`): the real API
(SQLite in a private data directory) and an embedded worker run in-process, with a private harness
cache where the tests plant other tenants' files for hostile problems to look for.

The service's working directory is a private folder holding a plaintext API key, as a user who
started ``kernelloop up`` beside one would have it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api import create_app
from config import Settings
from harness import Timeouts
from store import create_api_key, make_engine, make_session_factory
from store import session_scope as scope
from store.migrate import upgrade
from tests.support.databases import sqlite_url_in
from tests.support.tenancy import MEMORY_LIMIT_MB, QUICK_TIMING, Service
from worker.runner import harness_options_for


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
