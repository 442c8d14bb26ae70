"""``submit`` and ``watch`` against a live API: the job id, the live attempts, the exit codes.
No worker runs: the test plays the worker, writing attempts and the final state into the store."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store import Job, JobState, Target, claim_job, get_job, session_scope
from tests.support.cli import client_env, run, start
from tests.support.dashboard import WORKER_ID, Service, add_attempt, create_running_job, finish, verdict
from tests.support.paths import REPO
from vocabulary.verdict import Status

pytestmark = pytest.mark.timeout(180)


def _job(factory: sessionmaker[Session], job_id: int) -> Job:
    with session_scope(factory) as session:
        return get_job(session=session, job_id=job_id)


def _finish_process(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout, stderr


def test_submit_no_follow_prints_the_job_id(service: Service, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-used")  # the openai profile's key, in the API's process
    env = client_env(service, tmp_path)
    result = run(["submit", "level1/softmax", "--target", "cpu", "--llm", "scripted", "--trajectories", "2",
                  "--max-tokens", "5000", "--no-follow"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    job_id = int(result.stdout.splitlines()[0])
    job = _job(service.factory, job_id)
    assert job.state is JobState.QUEUED and job.target is Target.CPU and job.trajectories_count == 2
    assert job.budgets["max_tokens"] == 5000 and job.llm_profile == "scripted"
    assert f"/dashboard/jobs/{job_id}" in result.stderr
    # A problem file goes as its source.
    problem = tmp_path / "mine.py"
    problem.write_text((REPO / "problems/bundled/level1/softmax.py").read_text() + "# mine\n")
    posted = run(["submit", str(problem), "--target", "cpu", "--llm", "openai", "--no-follow"], env, tmp_path)
    assert posted.returncode == 0, posted.stderr
    with session_scope(service.factory) as session:
        assert get_job(session=session, job_id=int(posted.stdout.split()[0])).problem.bundled_id is None


def test_submit_reports_api_errors_and_unknown_problems(service: Service, tmp_path: Path) -> None:
    env = client_env(service, tmp_path)
    unknown = run(["submit", "level1/nope", "--no-follow"], env, tmp_path)
    assert unknown.returncode == 2 and "no bundled problem 'level1/nope'" in unknown.stderr
    bad_key = run(["submit", "level1/softmax", "--key", "kl_wrong", "--no-follow"], env, tmp_path)
    assert bad_key.returncode == 2 and "unknown or revoked" in bad_key.stderr
    missing = run(["submit", "not-a-problem", "--no-follow"], env, tmp_path)
    assert missing.returncode == 2 and "is neither a bundled problem id" in missing.stderr
    down = run(["watch", "1", "--api", "http://127.0.0.1:9"], env, tmp_path)
    assert down.returncode == 2 and "cannot reach the API" in down.stderr


def test_submit_follows_the_job_to_success(service: Service, tmp_path: Path) -> None:
    process = start(["submit", "level2/conv_tanh_scale_bias_maxpool", "--target", "cpu"], client_env(service, tmp_path),
                    tmp_path)
    line = process.stdout.readline() if process.stdout else ""
    job_id = int(line)
    with session_scope(service.factory) as session:
        assert claim_job(session=session, job_id=job_id, worker_id=WORKER_ID, lease_seconds=600) is not None
    add_attempt(service.factory, job_id, verdict(Status.FAIL, device="cpu", target="cpu"))
    add_attempt(service.factory, job_id, verdict(median_ms=2.0, device="cpu", target="cpu"), tokens=2000, cost_usd=0.5)
    finish(service.factory, job_id)
    code, stdout, stderr = _finish_process(process)
    assert code == 0, stderr
    assert "attempt   1" in stdout and "attempt   2" in stdout and "2.00× vs eager" in stdout
    assert f"job {job_id} is succeeded" in stdout
    assert f"kernelloop replay {job_id}" in stdout


def test_watch_shows_attempts_live_and_exits_by_the_final_state(service: Service, tmp_path: Path) -> None:
    job_id = create_running_job(service.factory, service.key_id, target=Target.CPU)
    add_attempt(service.factory, job_id, verdict(median_ms=5.0), tokens=10_000, cost_usd=0.25)
    process = start(["watch", str(job_id)], client_env(service, tmp_path), tmp_path)
    time.sleep(1.0)  # let it connect; what arrives later comes through the stream
    add_attempt(service.factory, job_id, verdict(median_ms=1.6), tokens=10_000, cost_usd=0.25)
    add_attempt(service.factory, job_id, verdict(Status.ERROR))
    finish(service.factory, job_id, JobState.FAILED, error="the LLM endpoint kept timing out")
    code, stdout, stderr = _finish_process(process)
    assert code == 1, stderr
    for n in (1, 2, 3):
        assert f"attempt   {n}" in stdout
    assert "0.80× vs eager" in stdout and "2.50× vs eager" in stdout and "1.56× vs compile" in stdout
    assert "the LLM endpoint kept timing out" in stdout
    # The closing table: the budgets line and the best attempt.
    assert "tokens 25,000 / 400,000" in stdout and "$0.50 / $5.00" in stdout
    assert "best: attempt 2" in stdout


def test_watch_exit_code_for_a_cancelled_job(service: Service, tmp_path: Path) -> None:
    job_id = create_running_job(service.factory, service.key_id, target=Target.CPU)
    finish(service.factory, job_id, JobState.CANCELLED)
    result = run(["watch", str(job_id)], client_env(service, tmp_path), tmp_path)
    assert result.returncode == 3, result.stderr
    missing = run(["watch", "999"], client_env(service, tmp_path), tmp_path)
    assert missing.returncode == 2 and "job 999 not found" in missing.stderr
