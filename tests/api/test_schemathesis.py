"""schemathesis against the OpenAPI spec of a live server (uvicorn on 127.0.0.1): no 5xx, and the
responses match the spec (status codes, content types, schemas, ``Allow`` headers, SSE events).

Every check but ``positive_data_acceptance`` runs: a schema cannot say "valid Python defining
``Model``", so schema-valid sources are rightly refused with 422.

The server runs in a thread of this process on a migrated SQLite file, with a key, a finished
job with attempts and a queued one, so id-based routes meet real rows as well as missing ones.
Streams are bounded to a second (a fuzzed request on a queued job's events must not hang).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api import StreamOptions, create_app
from store import (
    JobState,
    Target,
    claim_next_job,
    create_api_key,
    create_job,
    finish_job,
    get_or_create_problem,
    make_engine,
    make_session_factory,
    record_attempt,
    session_scope,
)
from store.migrate import upgrade
from tests.support.api import (
    CANDIDATE_SOURCE,
    PROBLEM_SOURCE,
    RecordingDispatcher,
    make_settings,
    serve,
    verdict_dict,
)
from vocabulary.verdict import Status, Verdict

#: Examples per operation, and the whole run's cap: together well under two minutes on 2 cores.
MAX_EXAMPLES = 25
RUN_TIMEOUT_S = 110
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def _seed(url: str) -> str:
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            key = create_api_key(
                session=session, name="fuzz", owner="fuzz", max_concurrent_jobs=10_000, max_jobs_per_day=10_000
            )
            problem = get_or_create_problem(session=session, source=PROBLEM_SOURCE, declarations={})
            done = create_job(session=session, problem_id=problem.id, target=Target.CPU, owner_id=key.key.id)
            create_job(session=session, problem_id=problem.id, target=Target.CUDA, owner_id=key.key.id)
            claim_next_job(session=session, worker_id="seed", target=Target.CPU, lease_seconds=600)
            for i, status in enumerate((Status.FAIL, Status.PASS)):
                record_attempt(
                    session=session, job_id=done.id, trajectory_id=None, tool="evaluate",
                    source=f"{CANDIDATE_SOURCE}# {i}\n", parent_id=None,
                    verdict=Verdict.from_dict(verdict_dict(status)),
                )
            finish_job(session=session, job_id=done.id, worker_id="seed", state=JobState.SUCCEEDED)
            return key.plaintext
    finally:
        engine.dispose()


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    url = f"sqlite:///{tmp_path / 'fuzz.db'}"
    upgrade(url)
    plaintext = _seed(url)
    app = create_app(
        make_settings(url, tmp_path),
        dispatcher=RecordingDispatcher(),
        stream_options=StreamOptions(poll_interval_s=0.05, keepalive_s=0.5, max_duration_s=1.0),
    )
    with serve(app) as base:
        yield base, plaintext


def test_the_spec_holds_and_nothing_answers_5xx(live_server: tuple[str, str], tmp_path: Path) -> None:
    base, key = live_server
    command = [
        str(SCHEMATHESIS), "run", f"{base}/openapi.json",
        "--header", f"X-API-Key: {key}",
        "--checks", "all",
        "--exclude-checks", "positive_data_acceptance",
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", "20240601",
        "--request-timeout", "10",
        "--workers", "1",
        "--phases", "examples,coverage,fuzzing,stateful",
        "--suppress-health-check", "all",
        "--no-color",
    ]
    env = {**os.environ, "NO_COLOR": "1"}
    start = time.monotonic()
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, cwd=tmp_path, check=False
    )
    elapsed = time.monotonic() - start
    assert result.returncode == 0, f"schemathesis found failures ({elapsed:.0f} s):\n{result.stdout[-12000:]}"
    assert "passed" in result.stdout and " 0 passed" not in result.stdout
