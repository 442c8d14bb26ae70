"""Helpers shared by the worker's tests and their subprocess entry points (not a test module)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from config import Settings
from harness import HarnessOptions, Timeouts, TimingOptions
from problems import load_problem
from store import JobKind, Target, create_job, get_or_create_problem

REPO = Path(__file__).resolve().parents[2]
PROBLEM_ID = "level2/conv_tanh_scale_bias_maxpool"
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


def agent_job(session: Session, script: str, *, trajectories: int = 1, llm_profile: str = "replay",
              target: Target = Target.CPU) -> int:
    job = create_job(session=session, problem_id=problem_row_id(session), target=target, kind=JobKind.AGENT,
                     llm_profile=llm_profile, llm_model=script, budgets={"turns": 4},
                     trajectories_count=trajectories)
    return job.id


def wait_for(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.1, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        time.sleep(interval)
