"""The worker's tests' jobs, settings and fakes: jobs written into the store, quick harness options,
a `ScriptedReferee`, a claimed job run in-process, and worker subprocesses (the Celery and embedded
entry points of this package, with the fake agent of `tests.support.fake_agent`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from config import Settings
from harness import HarnessOptions, Timeouts, TimingOptions
from problems import load_problem
from store import JobKind, Target, claim_job, create_job, get_or_create_problem, session_scope
from tests.support.paths import REPO
from vocabulary.devices import DeviceSpecs
from vocabulary.evaluation import Depth
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from worker.runner import RunOutcome, run_claimed_job

PROBLEM_ID = "level2/conv_tanh_scale_bias_maxpool"
#: The worker id of jobs claimed and run in-process (`claim`, `run_claimed`).
WORKER = "test-worker"
SEED1_CPU = (REPO / "examples" / "seed1_cpu.py").read_text()
SEED1_CPU_WRONG = (REPO / "examples" / "seed1_cpu_wrong.py").read_text()
#: The harness tests' quick timing: the same options give the same baseline cache key, so the
#: eager baseline measured by one suite serves the other.
QUICK_TIMING = TimingOptions(warmup_ms=5, min_repeats=5, max_time_s=0.3, input_sets=2)
#: Short leases so that recovery tests take seconds.
FAST_LEASES: dict[str, Any] = {
    "lease_seconds": 3.0,
    "heartbeat_seconds": 0.5,
    "reaper_interval_s": 0.5,
    "poll_interval_s": 0.1,
    "max_requeues": 1,
}


def quick_options(cache_dir: Path) -> HarnessOptions:
    return HarnessOptions(cache_dir=cache_dir, compile_baseline=False, timing=QUICK_TIMING,
                          timeouts=Timeouts(trial_s=8.0, load_s=60.0, timing_s=60.0))


def make_settings(*, data_dir: Path, database_url: str, cache_dir: Path, broker_url: str | None = None,
                  **overrides: Any) -> Settings:
    return Settings(data_dir=data_dir, database_url=database_url, cache_dir=cache_dir, broker_url=broker_url,
                    **{**FAST_LEASES, **overrides})


def settings_env(settings: Settings) -> dict[str, str]:
    """The ``KERNELLOOP_*`` variables that make a subprocess load the same settings."""
    env = {
        "KERNELLOOP_DATA_DIR": str(settings.data_dir),
        "KERNELLOOP_DATABASE_URL": settings.resolved_database_url,
        "KERNELLOOP_CACHE_DIR": str(settings.resolved_cache_dir),
        "KERNELLOOP_WORKER_TARGET": settings.worker_target,
        "KERNELLOOP_GPU_TYPE": settings.gpu_type,
    }
    for name in ("lease_seconds", "heartbeat_seconds", "reaper_interval_s", "poll_interval_s", "max_requeues",
                 "redispatch_after_s"):
        if getattr(settings, name) is not None:
            env[f"KERNELLOOP_{name.upper()}"] = str(getattr(settings, name))
    if settings.broker_url:
        env["KERNELLOOP_BROKER_URL"] = settings.broker_url
    return env


def problem_row_id(session: Session) -> int:
    problem = load_problem(PROBLEM_ID)
    declarations = {k: v for k, v in problem.to_dict().items() if k != "source"}
    return get_or_create_problem(session=session, source=problem.source, declarations=declarations,
                                 bundled_id=problem.id).id


def evaluation_job(session: Session, source: str = SEED1_CPU, target: Target = Target.CPU) -> int:
    job = create_job(session=session, problem_id=problem_row_id(session), target=target, kind=JobKind.EVALUATION,
                     candidate_source=source)
    return job.id


def agent_job(session: Session, script: str, *, trajectories: int = 1, llm_profile: str = "scripted",
              target: Target = Target.CPU) -> int:
    job = create_job(session=session, problem_id=problem_row_id(session), target=target, kind=JobKind.AGENT,
                     llm_profile=llm_profile, llm_model=script, budgets={"turns": 4},
                     trajectories_count=trajectories)
    return job.id


# -- a claimed job run in-process, with a referee that answers from a script ----------------------


def claim(factory: sessionmaker[Session], job_id: int, worker: str = WORKER) -> None:
    with session_scope(factory) as session:
        assert claim_job(session=session, job_id=job_id, worker_id=worker, lease_seconds=30) is not None


def run_claimed(settings: Settings, factory: sessionmaker[Session], job_id: int, **kwargs: Any) -> RunOutcome:
    """`worker.runner.run_claimed_job` as `WORKER`, with the quick harness options and the fake agent."""
    from tests.support import fake_agent  # it imports this module

    kwargs.setdefault("harness_options", quick_options(settings.resolved_cache_dir))
    kwargs.setdefault("run_agent", fake_agent.run_job)
    return run_claimed_job(job_id, settings=settings, session_factory=factory, worker_id=WORKER, **kwargs)


class ScriptedReferee:
    """A referee that answers from a list of verdicts (and counts what it was asked)."""

    def __init__(self, verdicts: list[Verdict], target: Target = Target.CPU) -> None:
        self.verdicts = list(verdicts)
        self.target = target
        self.asked: list[str] = []
        self.closed = 0

    def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
        self.asked.append(Depth(depth).value)
        return self.verdicts.pop(0)

    @property
    def device_specs(self) -> DeviceSpecs:
        return DeviceSpecs(target="cpu", name="fake")

    def close(self) -> None:
        self.closed += 1


#: An infrastructure failure, as the referee reports one (the worker retries it).
INFRA = Verdict(status=Status.ERROR, stage=Stage.CORRECTNESS, error_kind=ErrorKind.INFRA,
                message="the comparer failed: channel closed")


# -- worker subprocesses --------------------------------------------------------------------------


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_") or k.startswith("KERNELLOOP_TEST")}
    return {**env, **settings_env(settings), "PYTHONUNBUFFERED": "1"}


@contextmanager
def worker_process(argv: list[str], settings: Settings, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A worker subprocess in its own process group, logging to ``log_path``; killed at the end."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(argv, cwd=REPO, env=_env(settings), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def celery_worker_argv(name: str, queue: str = "cpu") -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "tests.support.celery_entry", "worker", "-Q", queue, "-c", "1",
            "--pool", "solo", "-n", f"{name}@%h", "--loglevel", "INFO", "--without-gossip", "--without-mingle"]


def embedded_worker_argv() -> list[str]:
    return [sys.executable, "-m", "tests.support.embedded_entry"]
