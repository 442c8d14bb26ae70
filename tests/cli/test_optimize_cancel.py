"""Ctrl-C (and SIGTERM) on ``kernelloop optimize`` cancel its job, with ``kernelloop up`` sharing the
data directory, as the user of issue 24 met it: in a terminal, the installed command.

Before: Ctrl-C exited 130 silently and left the job ``running``; its lease expired, the reaper of
``up`` re-queued it and ``up``'s worker ran it to the end (with a paid model, Ctrl-C did not stop
the spending). Now the cancel is stored, the evaluation in flight is cut short and recorded as
``cancelled`` (not as the candidate's failure), the job ends ``cancelled``, the command says so and
exits 3, and nothing takes the job up again. The leases here are short (8 s) so that a job left
``running`` would be re-queued within the test. One ``up`` serves both signals, one job each.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.providers.scripted_candidates import candidate_source
from harness import HarnessOptions, Referee
from problems import load_problem
from store import Attempt, JobEvent, JobState, get_job, make_engine, make_session_factory, session_scope
from tests.support.cli import KERNELLOOP_COMMAND, pythonpath
from tests.support.databases import sqlite_url_in
from tests.support.network import free_port, wait_healthy
from tests.support.terminal import Terminal
from vocabulary.evaluation import Depth, Target
from vocabulary.verdict import Status

pytestmark = pytest.mark.slow

#: Short leases: a job left running without heartbeats is re-queued within seconds.
LEASE_S, HEARTBEAT_S, REAPER_S = 8, 2, 1
PROBLEM = "level1/softmax"
#: The stage a cold cache runs for tens of seconds on a CPU: the moment to press Ctrl-C.
BASELINES = r"now: timing eager PyTorch and torch\.compile \(once per problem\)"


def _env(tmp_path: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_") or k.startswith("KERNELLOOP_TEST")}
    env.update(PYTHONPATH=pythonpath(), HOME=str(tmp_path / "home"), KERNELLOOP_DATA_DIR=str(tmp_path / "data"),
               KERNELLOOP_CACHE_DIR=str(cache), KERNELLOOP_POLL_INTERVAL_S="0.2", KERNELLOOP_WARM_HEADERS="false",
               KERNELLOOP_LEASE_SECONDS=str(LEASE_S), KERNELLOOP_HEARTBEAT_SECONDS=str(HEARTBEAT_S),
               KERNELLOOP_REAPER_INTERVAL_S=str(REAPER_S), CUDA_VISIBLE_DEVICES="")
    return env


def _cold_baselines_cache(tmp_path: Path, harness_cache: Path) -> Path:
    """The session's builds (hard links: no compile here), the scripted job's among them, without
    its baselines: the first benchmark times eager PyTorch and torch.compile, long enough to be
    interrupted."""
    options = HarnessOptions(cache_dir=harness_cache, prestart=False, compile_baseline=False)
    with Referee(load_problem(PROBLEM), Target.CPU, options) as referee:  # built once in the session
        built = referee.evaluate(candidate_source(PROBLEM, "cpu", "fast"), Depth.COMPILE)
    assert built.status is Status.PASS, built.message
    cache = tmp_path / "cache"
    shutil.copytree(harness_cache / "builds", cache / "builds", copy_function=os.link)
    return cache


def _interrupt(env: dict[str, str], cwd: Path, job: int, interrupt: Callable[[Terminal], None]) -> None:
    """Run ``kernelloop optimize`` (its ``job``) in a terminal until its baselines are being timed,
    interrupt it, and check what the person sees."""
    terminal = Terminal([str(KERNELLOOP_COMMAND), "optimize", PROBLEM, "--llm", "scripted", "--target", "cpu"],
                        cwd=cwd, env=env)
    try:
        terminal.wait_for(BASELINES, timeout=900)
        interrupt(terminal)
        code = terminal.finish(timeout=120)
    finally:
        terminal.kill()
    screen = terminal.screen
    flat = " ".join(screen.split())
    assert code == 3, screen[-5000:]
    assert f"cancelling job {job}" in flat, flat[-3000:]
    assert f"job {job} is cancelled: nothing more runs or is charged" in flat, flat[-3000:]
    assert "Traceback" not in screen and "KeyboardInterrupt" not in screen


def test_ctrl_c_and_sigterm_on_optimize_cancel_their_jobs_for_good(tmp_path: Path, harness_cache: Path) -> None:
    cache = _cold_baselines_cache(tmp_path, harness_cache)
    env = _env(tmp_path, cache)
    port = free_port()
    log = tmp_path / "up.log"
    with log.open("wb") as sink:
        up = subprocess.Popen([str(KERNELLOOP_COMMAND), "up", "--port", str(port), "--target", "cpu"], cwd=tmp_path,
                              env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", up, log, timeout=180)
        _interrupt(env, tmp_path, 1, lambda terminal: terminal.type(b"\x03"))  # Ctrl-C
        _interrupt(env, tmp_path, 2, lambda terminal: terminal.signal(signal.SIGTERM))

        # Well past the lease, with `up`'s reaper and worker polling: nothing takes either job up again.
        time.sleep(3 * LEASE_S)
        assert up.poll() is None, log.read_text()[-3000:]
        engine = make_engine(sqlite_url_in(tmp_path / "data"))
        try:
            with session_scope(make_session_factory(engine)) as session:
                for job_id in (1, 2):
                    job = get_job(session=session, job_id=job_id)
                    assert job.state is JobState.CANCELLED and job.cancel_requested, (job_id, job.state, job.error)
                    states = [e.payload.get("state") for e in session.query(JobEvent).filter_by(
                        job_id=job_id, type="state").order_by(JobEvent.id)]
                    assert states == ["queued", "running", "cancelled"], (job_id, states)
                    attempts = session.query(Attempt).filter_by(job_id=job_id).order_by(Attempt.n).all()
                    kinds = [(a.tool, a.status.value, a.error_kind.value if a.error_kind else None) for a in attempts]
                    # The benchmark cut short while its baselines were timed: stored as cancelled,
                    # never as a failure of the candidate's or ours.
                    assert kinds and kinds[-1] == ("benchmark", "error", "cancelled"), (job_id, kinds)
                    assert not any(kind == "infra" for _, _, kind in kinds), (job_id, kinds)
        finally:
            engine.dispose()
        assert "re-queued" not in log.read_text(errors="replace")
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
