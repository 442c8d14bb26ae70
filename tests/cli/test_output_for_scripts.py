"""Output that scripts and narrow terminals can use (issue 24, items 6, 7 and 8), the installed
``kernelloop`` run as a user runs it against a live API: piped (``| cat``: no terminal, no
``COLUMNS``) and in an 80-column terminal.

Before: ``jobs | cat`` wrapped the problem name one block per line, ``problems list`` cut the ids one
copies, ``watch``'s one-line-per-event mode broke lines inside fields (Rich wraps at 80 columns off a
terminal), failed jobs did not say why, ``submit --llm openai:gpt-4o`` was refused and the CLI
numbered trajectories by their database ids (1, 2, 6) where the dashboard says 0, 1, 2.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from rich.text import Text

from cli.client.view import JobView
from problems import bundled_problems
from store import JobState, Target
from tests.support.cli import KERNELLOOP_COMMAND, client_env
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
from tests.support.terminal import Terminal

pytestmark = pytest.mark.timeout(300)

#: Why a job failed, as long as real ones are (an LLM endpoint's message).
LONG_REASON = ("the LLM endpoint failed after 5 tries: APIConnectionError: Connection error (http://127.0.0.1:9/v1 "
               "refused the connection); check the profile's base_url and that the server is up")


def _env(service: Service, home: Path) -> dict[str, str]:
    env = client_env(service, home)
    for name in ("COLUMNS", "LINES"):  # a pipe has no width: what `| cat` gets
        env.pop(name, None)
    return env


def piped(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KERNELLOOP_COMMAND), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def at_80_columns(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    terminal = Terminal([str(KERNELLOOP_COMMAND), *args], cwd=cwd, env=env, columns=80)
    code = terminal.finish(timeout=120)
    return code, terminal.screen


def test_jobs_piped_is_one_record_a_line_and_says_why_a_job_failed(service: Service, tmp_path: Path) -> None:
    env = _env(service, tmp_path)
    running = create_running_job(service.factory, service.key_id)
    failed = create_running_job(service.factory, service.key_id, problem="level1/softmax", target=Target.CPU)
    finish(service.factory, failed, JobState.FAILED, error=LONG_REASON)
    done = create_running_job(service.factory, service.key_id, problem="level1/softmax", target=Target.CPU)
    add_attempt(service.factory, done, verdict(median_ms=2.0, device="cpu", target="cpu"))
    finish(service.factory, done)

    listed = piped(["jobs"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 4, listed.stdout  # the header, then one line a job, however long
    assert lines[0].split()[:3] == ["id", "state", "problem"] and lines[0].rstrip().endswith("why")
    rows = {int(line.split()[0]): line for line in lines[1:]}
    assert set(rows) == {running, failed, done}
    assert SEED_PROBLEM in rows[running].split() and "…" not in listed.stdout
    assert rows[failed].split()[1] == "failed" and rows[failed].endswith(LONG_REASON)
    assert rows[done].split()[1] == "succeeded" and "2.00×" in rows[done]
    assert "3 jobs" in listed.stderr  # the title: a note, not a record

    code, screen = at_80_columns(["jobs"], env, tmp_path)
    assert code == 0, screen
    assert all(len(line) <= 80 for line in screen.splitlines()), screen
    assert re.search(rf"^\s*{running}\s+running\s+{re.escape(SEED_PROBLEM)}\s", screen, re.M), screen
    assert re.search(rf"^\s*{failed}\s+failed\s+level1/softmax\s", screen, re.M), screen
    # Why it failed, under the table, whole (wrapped between words).
    assert f"job {failed} failed: {LONG_REASON}" in " ".join(screen.split()), screen


def test_problems_list_never_cuts_an_id(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    ids = [p.id for p in bundled_problems()]
    listed = subprocess.run([str(KERNELLOOP_COMMAND), "problems", "list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 1 + len(ids) and lines[0].split() == ["id", "level", "mode", "policy", "description"]
    assert [line.split()[0] for line in lines[1:]] == ids

    code, screen = at_80_columns(["problems", "list"], env, tmp_path)
    assert code == 0, screen
    assert all(len(line) <= 80 for line in screen.splitlines()), screen
    for problem_id in ids:
        assert re.search(rf"^\s*{re.escape(problem_id)}\s", screen, re.M), (problem_id, screen)


def _two_trajectory_job(service: Service) -> int:
    """A finished job whose trajectories have store ids other than their indices (another job's come
    first), with attempts in the second."""
    with worker_recorder(service.factory, create_running_job(service.factory, service.key_id)) as earlier:
        earlier.trajectory_started(index=0)
        earlier.trajectory_started(index=1)
    job_id = create_running_job(service.factory, service.key_id)
    with worker_recorder(service.factory, job_id) as recorder:
        recorder.trajectory_started(index=0)
        recorder.trajectory_started(index=1)
        record_session(recorder, 1, agent_session(), user_prompt="Write a faster ModelNew for this problem.")
    finish(service.factory, job_id)
    return job_id


def test_watch_piped_breaks_no_line_and_numbers_trajectories_as_the_dashboard(service: Service,
                                                                               tmp_path: Path) -> None:
    env = _env(service, tmp_path)
    job_id = _two_trajectory_job(service)
    watched = piped(["watch", str(job_id)], env, tmp_path)
    assert watched.returncode == 0, watched.stderr
    out = watched.stdout.splitlines()
    # Every line the view gives an event is printed whole, however long (the agent's words are
    # 160 characters), never broken at 80 columns.
    events = [json.loads(line) for line in piped(["watch", str(job_id), "--json"], env, tmp_path).stdout.splitlines()]
    view = JobView(job=events[-1]["data"])
    expected = [Text.from_markup(line).plain for e in events[:-1]
                if (line := view.apply(e["type"], e["data"])) is not None]
    expected_lines = [piece for line in expected for piece in line.splitlines()]
    assert any(len(line) > 80 for line in expected_lines)
    for line in expected_lines:
        assert line in out, (line, watched.stdout)
    # The second trajectory is "t1" (as the dashboard names it), never its store id (4).
    attempts = [line for line in out if line.startswith("attempt ")]
    assert attempts and all(line.split()[2] == "t1" for line in attempts), attempts
    header = next(line for line in out if line.split()[:2] == ["#", "traj"])
    rows = out[out.index(header) + 1:out.index(header) + 1 + len(attempts)]
    assert [row.split()[1] for row in rows] == ["1"] * len(attempts), rows
    assert rows[-1].split()[0] == "5★"  # the best: one field, a script's int(field.rstrip("★"))
    # The ratios' bases beside them: eager's and torch.compile's milliseconds.
    assert "vs eager 4.000 ms" in header, header


def test_submit_takes_profile_colon_model_as_the_readme_says(service: Service, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the API (in this process) refuses a profile without its key
    env = _env(service, tmp_path)
    queued = piped(["submit", "level1/softmax", "--llm", "openai:gpt-4o", "--no-follow", "--json"], env, tmp_path)
    assert queued.returncode == 0, queued.stderr
    job = json.loads(queued.stdout.splitlines()[0])
    assert (job["llm_profile"], job["llm_model"]) == ("openai", "gpt-4o")
    assert "(LLM openai (gpt-4o))" in " ".join(queued.stderr.split())
    # Without a model: the profile's own, stored (the dashboard showed "LLM scripted (None)").
    queued = piped(["submit", "level1/softmax", "--llm", "scripted", "--no-follow", "--json"], env, tmp_path)
    job = json.loads(queued.stdout.splitlines()[0])
    assert (job["llm_profile"], job["llm_model"]) == ("scripted", "scripted")
    refused = piped(["submit", "level1/softmax", "--llm", "nope:gpt-4o", "--no-follow"], env, tmp_path)
    assert refused.returncode == 2 and "--llm 'nope' is not configured on this server" in refused.stderr


def test_help_shows_no_type_on_plain_flags(tmp_path: Path) -> None:
    commands = [["up"], ["serve"], ["optimize"], ["submit"], ["watch"], ["jobs"], ["eval"], ["replay"],
                ["problems", "check"], ["keys", "list"], []]
    for command in commands:
        shown = subprocess.run([str(KERNELLOOP_COMMAND), *command, "--help"], cwd=tmp_path, capture_output=True,
                               text=True, timeout=60, env={**os.environ, "COLUMNS": "100"})
        assert shown.returncode == 0, shown.stderr
        assert "<bool>" not in shown.stdout, (command, shown.stdout)
        assert re.search(r"^\s+--help\s+Show this message and exit\.", shown.stdout, re.M), shown.stdout
    shown = subprocess.run([str(KERNELLOOP_COMMAND), "optimize", "--help"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60, env={**os.environ, "COLUMNS": "100"})
    assert re.search(r"^\s+--json\s+the new job as JSON", shown.stdout, re.M), shown.stdout
    assert re.search(r"^\s+--max-cost <float", shown.stdout, re.M), shown.stdout  # a value's type stays
