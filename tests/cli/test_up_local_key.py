"""``kernelloop up``'s banner and log, and the local key: made once per data directory, sent by
the CLI to a local API when given no key, the owner of ``optimize``'s jobs."""

from __future__ import annotations

import json
import os
import stat
import time
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from cli.keys import ensure_local_key
from config import Settings
from store import make_engine, make_session_factory, revoke_api_key, session_scope
from tests.support.cli import KERNELLOOP, Embedded, api_env, run


def test_the_local_key_is_made_once_and_again_when_revoked(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path / "data")  # type: ignore[call-arg]
    settings.data_dir.mkdir()
    first = ensure_local_key(settings)
    assert first.created and first.path == tmp_path / "data" / "local-api-key"
    assert first.path.read_text().strip() == first.plaintext
    assert stat.S_IMODE(os.stat(first.path).st_mode) == 0o600
    again = ensure_local_key(settings)
    assert not again.created and (again.key_id, again.plaintext) == (first.key_id, first.plaintext)
    engine = make_engine(settings.resolved_database_url)
    with session_scope(make_session_factory(engine)) as session:
        revoke_api_key(session=session, api_key_id=first.key_id)
    engine.dispose()
    renewed = ensure_local_key(settings)
    assert renewed.created and renewed.key_id != first.key_id
    assert renewed.path.read_text().strip() == renewed.plaintext


def test_up_says_where_the_dashboard_is_and_logs_no_requests(embedded: Embedded, tmp_path: Path) -> None:
    for _ in range(5):  # what a polling client does
        urllib.request.urlopen(f"{embedded.base_url}/health", timeout=10).read()
    deadline = time.monotonic() + 90
    while "embedded worker" not in embedded.log_tail(20_000):  # the worker's first line
        assert time.monotonic() < deadline, embedded.log_tail()
        time.sleep(0.5)
    log = embedded.log_tail(20_000)
    port = embedded.base_url.rsplit(":", 1)[1]
    assert f"dashboard  http://127.0.0.1:{port}/dashboard" in log
    key_file = tmp_path / "data" / "local-api-key"
    assert f"sign in with your local key: cat {key_file}" in log
    assert "--access-log logs every request" in log and "GET /health" not in log
    # One format: uvicorn's lines and the workers' alike ("<date> <time> LEVEL logger: message").
    assert " INFO uvicorn.error: Uvicorn running on" in log and " INFO worker.embedded: embedded worker" in log
    assert "INFO:     " not in log

    # The CLI on this machine, given no key, sends the local key to the local API.
    env = api_env(embedded.base_url, "", tmp_path, KERNELLOOP_DATA_DIR=str(tmp_path / "data"))
    env.pop("KERNELLOOP_API_KEY")
    listed = run(["jobs", "--json"], env, tmp_path, program=KERNELLOOP)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"items": [], "total": 0} and "no API key" not in listed.stderr


def test_optimize_jobs_belong_to_the_local_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """So the dashboard of `kernelloop up` shows them to the local user (a job without an owner is
    every normal key's 404). The job body is not run here: only who owns the job is looked at."""
    import worker.runner
    from cli.main import app
    from store import Job

    monkeypatch.setattr(worker.runner, "run_claimed_job", lambda *args, **kwargs: None)
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    result = CliRunner().invoke(app, ["optimize", "level1/softmax", "--target", "cpu", "--data-dir", str(data)],
                                env={"COLUMNS": "200", "KERNELLOOP_DATA_DIR": str(data)})
    assert "dashboard: run `kernelloop up`, open http://127.0.0.1:8000/dashboard/jobs/1" in result.output
    assert f"`cat {data / 'local-api-key'}`" in result.output
    settings = Settings(_env_file=None, data_dir=data)  # type: ignore[call-arg]
    local = ensure_local_key(settings)
    assert not local.created
    engine = make_engine(settings.resolved_database_url)
    with session_scope(make_session_factory(engine)) as session:
        assert [j.owner_id for j in session.scalars(select(Job))] == [local.key_id]
    engine.dispose()
