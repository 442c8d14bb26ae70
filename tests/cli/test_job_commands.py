"""``kernelloop jobs``, ``cancel``, ``messages``, ``logs``, ``watch --json``, ``--version`` and the
API's errors in the CLI's words, against a live API whose jobs the test writes into the store (the
recorder a worker uses for the agent's messages and attempts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store import JobState, Target, create_api_key, session_scope
from tests.support.cli import KERNELLOOP, api_env, client_env, run
from tests.support.dashboard import (
    SEED_PROBLEM,
    Service,
    add_attempt,
    agent_session,
    create_running_job,
    finish,
    record_session,
    verdict,
    worker_recorder,
)

pytestmark = pytest.mark.timeout(180)


def kl(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    done = run(args, env, cwd, program=KERNELLOOP)
    return done.returncode, done.stdout, done.stderr


def _recorded_job(service: Service) -> int:
    """A finished job with a trajectory of messages and attempts, as a worker records them."""
    job_id = create_running_job(service.factory, service.key_id)
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.trajectory_started(index=0)
        record_session(recorder, 0, agent_session(), user_prompt="Write a faster ModelNew for this problem.")
        source = json.dumps({"source": "import torch\nclass ModelNew(torch.nn.Module):\n    TILE = 128\n"})
        recorder.message(trajectory_index=0, role="assistant", content="Submitting.", tokens_in=7_000, tokens_out=300,
                         tool_calls=[{"id": "call_submit", "type": "function",
                                      "function": {"name": "submit", "arguments": source}}])
    finish(service.factory, job_id)
    return job_id


def test_jobs_lists_with_filters_in_a_table_and_as_json(service: Service, tmp_path: Path) -> None:
    env = client_env(service, tmp_path)
    seed = create_running_job(service.factory, service.key_id)
    softmax = create_running_job(service.factory, service.key_id, problem="level1/softmax", target=Target.CPU)
    add_attempt(service.factory, softmax, verdict(median_ms=2.0, device="cpu", target="cpu"))
    finish(service.factory, softmax)

    code, stdout, stderr = kl(["jobs"], env, tmp_path)
    assert code == 0, stderr
    assert "2 jobs" in stderr  # piped: the title is a note, stdout the header and one line a job
    assert len(stdout.splitlines()) == 3
    # Nothing cut: the longest problem id and the states read whole.
    assert SEED_PROBLEM in stdout and "level1/softmax" in stdout and "running" in stdout and "succeeded" in stdout
    assert "2.00×" in stdout  # the finished job's best vs eager (4 ms / 2 ms)

    code, stdout, stderr = kl(["jobs", "--state", "running"], env, tmp_path)
    assert SEED_PROBLEM in stdout and "level1/softmax" not in stdout and "state running" in stderr
    code, stdout, _ = kl(["jobs", "--target", "cpu", "--json"], env, tmp_path)
    listed = json.loads(stdout)
    assert [j["id"] for j in listed["items"]] == [softmax] and listed["total"] == 1
    code, stdout, _ = kl(["jobs", "--problem", SEED_PROBLEM, "--json"], env, tmp_path)
    assert [j["id"] for j in json.loads(stdout)["items"]] == [seed]
    code, stdout, _ = kl(["jobs", "--limit", "1", "--json"], env, tmp_path)
    assert [j["id"] for j in json.loads(stdout)["items"]] == [softmax]
    code, _, stderr = kl(["jobs", "--state", "done"], env, tmp_path)
    assert code == 2 and "queued, running, succeeded, failed, cancelled" in stderr
    code, stdout, stderr = kl(["jobs", "--state", "failed"], env, tmp_path)
    assert code == 0 and stdout == "" and "no jobs match (state failed)" in stderr


def test_cancel_a_running_a_finished_and_someone_elses_job(service: Service, tmp_path: Path) -> None:
    env = client_env(service, tmp_path)
    running = create_running_job(service.factory, service.key_id)
    code, stdout, stderr = kl(["cancel", str(running)], env, tmp_path)
    assert code == 0, stderr
    assert f"job {running} is running: its worker stops it at the next safe point" in stdout
    code, stdout, _ = kl(["cancel", str(running), "--json"], env, tmp_path)
    assert json.loads(stdout)["job"]["cancel_requested"] is True

    done = create_running_job(service.factory, service.key_id)
    finish(service.factory, done, JobState.FAILED, error="boom")
    code, _, stderr = kl(["cancel", str(done)], env, tmp_path)
    assert code == 1 and f"job {done} already failed; there is nothing to cancel" in stderr

    code, _, stderr = kl(["cancel", "999"], env, tmp_path)
    assert code == 2 and "job 999 not found" in stderr and "`kernelloop jobs` lists yours" in stderr
    assert "POST" not in stderr and "HTTP" not in stderr


def test_messages_in_full_and_as_json_lines(service: Service, tmp_path: Path) -> None:
    env = client_env(service, tmp_path)
    job_id = _recorded_job(service)
    code, stdout, stderr = kl(["messages", str(job_id)], env, tmp_path)
    assert code == 0, stderr
    assert "Write a faster ModelNew for this problem." in stdout
    # An assistant message whole (longer than the 100-character previews of the event stream).
    assert ("Shapes: 256→254 after the 3×3 conv, 254→63 after the 4×4 pool; memory-bound. A first fused "
            "pool-first epilogue with a large block.") in stdout.replace("\n", " ").replace("  ", " ")
    assert "→ submit(source=<4 lines>)" in stdout and "TILE = 128" not in stdout  # a source folded to its size
    assert "6,000 in / 900 out · 2.4 s" in stdout
    code, stdout, _ = kl(["messages", str(job_id), "--full"], env, tmp_path)
    assert "    TILE = 128" in stdout
    code, stdout, _ = kl(["messages", str(job_id), "--json"], env, tmp_path)
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert [m["role"] for m in lines[:3]] == ["system", "user", "assistant"] and len(lines) == 2 + 6 * 2 + 1
    code, stdout, _ = kl(["messages", str(job_id), "--follow"], env, tmp_path)  # ended: returns at once
    assert code == 0 and "Write a faster ModelNew" in stdout


def test_logs_and_watch_json_of_a_finished_job(service: Service, tmp_path: Path) -> None:
    env = client_env(service, tmp_path)
    job_id = _recorded_job(service)
    code, stdout, stderr = kl(["logs", str(job_id)], env, tmp_path)
    assert code == 0, stderr
    assert "job is running" in stdout and "job is succeeded" in stdout
    assert "attempt 1: compile → error at compile" in stdout
    assert "assistant message calling benchmark" in stdout
    assert "{'" not in stdout  # no raw dict
    code, stdout, _ = kl(["logs", str(job_id), "--json"], env, tmp_path)
    events = [json.loads(line) for line in stdout.splitlines()]
    assert events[0]["type"] == "state" and {"attempt", "message"} <= {e["type"] for e in events}

    code, stdout, stderr = kl(["watch", str(job_id), "--json"], env, tmp_path)
    assert code == 0, stderr
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert lines[-1]["type"] == "job" and lines[-1]["data"]["state"] == "succeeded"
    assert [e["id"] for e in lines[:-1]] == [e["id"] for e in events]


def test_logs_of_a_running_job_stops_once_read_unless_followed(service: Service, tmp_path: Path) -> None:
    env = client_env(service, tmp_path)
    job_id = create_running_job(service.factory, service.key_id)
    add_attempt(service.factory, job_id, verdict())
    code, stdout, stderr = kl(["logs", str(job_id)], env, tmp_path)
    assert code == 0, stderr
    assert "job is running" in stdout and "attempt 1: benchmark → pass" in stdout


def test_errors_say_what_to_type(service: Service, tmp_path: Path) -> None:
    with session_scope(service.factory) as session:
        one_job = create_api_key(session=session, name="tight", owner="tight", max_concurrent_jobs=1,
                                 max_jobs_per_day=10)
        plaintext, key_id = one_job.plaintext, one_job.key.id
    env = api_env(service.base_url, plaintext, tmp_path)
    create_running_job(service.factory, key_id)
    code, _, stderr = kl(["submit", "level1/softmax", "--no-follow"], env, tmp_path)
    assert code == 2
    assert "this key has 1 jobs queued or running, and may have 1 at once" in stderr
    assert "`kernelloop cancel JOB_ID`" in stderr and "`kernelloop jobs --state running`" in stderr
    assert "POST" not in stderr and "/jobs/" not in stderr

    code, _, stderr = kl(["submit", "level9/nothing_like_it", "--no-follow"], env, tmp_path)
    assert code == 2 and "`kernelloop problems list`" in stderr and "path of a problem file" in stderr
    assert "problem_source" not in stderr and "GET /problems" not in stderr

    code, _, stderr = kl(["submit", "level1/softmax", "--llm", "nope", "--no-follow"],
                         api_env(service.base_url, service.key, tmp_path), tmp_path)
    assert code == 2 and "--llm 'nope' is not configured on this server" in stderr and "llm_profile" not in stderr

    code, _, stderr = kl(["jobs"], api_env(service.base_url, "kl_not_a_key", tmp_path), tmp_path)
    assert code == 2 and "the API key is unknown or revoked" in stderr and "X-API-Key" not in stderr


def test_submit_json_and_version(service: Service, tmp_path: Path) -> None:
    env = client_env(service, tmp_path)
    code, stdout, stderr = kl(["submit", "level1/softmax", "--target", "cpu", "--no-follow", "--json"], env, tmp_path)
    assert code == 0, stderr
    job = json.loads(stdout)
    assert job["state"] == "queued" and job["target"] == "cpu" and job["problem"]["bundled_id"] == "level1/softmax"

    code, stdout, _ = kl(["--version"], env, tmp_path)
    assert code == 0 and stdout.startswith("kernelloop 0.1.0 · torch 2.") and "Python 3." in stdout


def test_quota_errors_are_read_from_the_words_of_older_servers() -> None:
    """A server without the 429's ``quota`` field: the kind of quota comes from its detail."""
    from cli.client.http import ApiRequestError, in_user_terms

    full = ApiRequestError("this key has 2 jobs queued or running, its limit is 2; wait for one to finish or "
                           "cancel one (POST /jobs/{id}/cancel)", status=429, code="quota_exceeded")
    assert full.quota_name == "max_concurrent_jobs"
    assert "POST" not in in_user_terms(full) and "`kernelloop cancel JOB_ID`" in in_user_terms(full)
    daily = ApiRequestError("this key created 9 jobs in the last 24 hours, its limit is 9; try again later", status=429)
    assert daily.quota_name == "max_jobs_per_day" and "try again later" in in_user_terms(daily)
    assert ApiRequestError("job 3 not found", status=404).quota_name is None
