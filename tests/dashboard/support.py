"""A live kernelloop API for browser and CLI tests: uvicorn on 127.0.0.1 (a free port) against a
migrated SQLite file, an API key, and jobs and attempts written straight into the store with real
harness `Verdict`s (no worker runs)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from sqlalchemy.orm import Session, sessionmaker

from api import NullDispatcher, StreamOptions, create_app
from config import Settings
from harness import Baselines, CompileResult, ErrorKind, Stage, Status, Timing, Trial, Verdict
from problems import Problem, load_problem
from store import (
    JobState,
    Target,
    add_job_usage,
    claim_job,
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

REPO = Path(__file__).resolve().parents[2]
SEED_PROBLEM = "level2/conv_tanh_scale_bias_maxpool"
WORKER_ID = "test-worker"
#: Streams poll fast in tests, and reconnect quickly when the server closes them.
STREAM_OPTIONS = StreamOptions(poll_interval_s=0.05, keepalive_s=15.0, max_duration_s=60.0, retry_ms=200)


@dataclass(frozen=True)
class Service:
    base_url: str
    factory: sessionmaker[Session]
    key: str
    key_id: int

    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.key}


_FAILURE_MESSAGES = {
    Status.FAIL: "output mismatch on trial 1: max abs error 0.31 (atol 1e-4), 20% of elements differ",
    Status.ERROR: "compile failed: kernel.cu(41): error: identifier \"TILE\" is undefined",
}


def _timing(ms: float) -> Timing:
    return Timing.from_samples([ms * 0.98, ms * 0.99, ms, ms, ms * 1.01, ms * 1.03], clock="cuda_events")


def verdict(
    status: Status = Status.PASS,
    *,
    median_ms: float | None = 1.0,
    eager_ms: float = 4.0,
    compile_ms: float = 2.5,
    device: str = "NVIDIA H200",
    target: str = "cuda",
    message: str = "",
    stage: Stage | None = None,
) -> dict[str, Any]:
    """A real ``Verdict.to_dict()`` with the figures a timed evaluation has."""
    correct = status in (Status.PASS, Status.SUSPICIOUS)
    failed_stage = Stage.COMPILE if status is Status.ERROR else Stage.CORRECTNESS
    v = Verdict(
        status=status,
        stage=stage or (Stage.DONE if correct else failed_stage),
        error_kind=None if correct else ErrorKind.CANDIDATE,
        message=message or _FAILURE_MESSAGES.get(status, ""),
        compile=CompileResult(ok=status is not Status.ERROR, seconds=41.2, kernels=({"kernel": "k", "registers": 40},)),
        trials=tuple(
            Trial(seed_index=i, passed=correct, max_abs_err=1e-6 if correct else 0.31, mean_abs_err=1e-7,
                  mismatch_frac=0.0 if correct else 0.2)
            for i in range(3)
        ) if status is not Status.ERROR else (),
        timing=_timing(median_ms) if (correct and median_ms is not None) else None,
        baselines=Baselines(eager=_timing(eager_ms), compiled=_timing(compile_ms)) if correct else None,
        sol_ms=0.21,
        flops=4.83e9,
        min_bytes=3.1e8,
        provenance={"device": device, "target": target, "torch": "2.11.0", "cuda": "13.0", "harness": "0.1.0"},
    )
    return v.to_dict()


def migrated_factory(directory: Path) -> tuple[str, sessionmaker[Session]]:
    directory.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{directory / 'kernelloop.db'}"
    upgrade(url)
    return url, make_session_factory(make_engine(url))


def create_key(factory: sessionmaker[Session], owner: str = "alice", *, is_admin: bool = False) -> tuple[int, str]:
    with session_scope(factory) as session:
        issued = create_api_key(
            session=session, name=owner, owner=owner, is_admin=is_admin, max_concurrent_jobs=100,
            max_jobs_per_day=1000,
        )
        return issued.key.id, issued.plaintext


def store_problem(session: Session, problem: Problem, *, bundled: bool = True) -> int:
    declarations = {k: v for k, v in problem.to_dict().items() if k != "source"}
    return get_or_create_problem(
        session=session, source=problem.source, declarations=declarations, bundled_id=problem.id if bundled else None
    ).id


def create_running_job(
    factory: sessionmaker[Session],
    owner_id: int,
    *,
    problem: str = SEED_PROBLEM,
    target: Target = Target.CUDA,
    budgets: dict[str, Any] | None = None,
) -> int:
    """A job as a worker holds it: created, then claimed by `WORKER_ID`."""
    with session_scope(factory) as session:
        job = create_job(
            session=session,
            problem_id=store_problem(session, load_problem(problem)),
            target=target,
            owner_id=owner_id,
            llm_profile="replay",
            llm_model="replay",
            budgets=budgets or {"turns": 10, "tool_calls": 30, "max_tokens": 400_000, "max_cost_usd": 5.0,
                                "wall_clock_s": 3600.0},
        )
        claim_job(session=session, job_id=job.id, worker_id=WORKER_ID, lease_seconds=3600)
        return job.id


def add_attempt(
    factory: sessionmaker[Session],
    job_id: int,
    verdict_dict: dict[str, Any],
    *,
    source: str | None = None,
    tool: str = "benchmark",
    tokens: int = 0,
    cost_usd: float = 0.0,
) -> int:
    """Record an attempt as the worker would (the store appends its ``attempt`` event)."""
    with session_scope(factory) as session:
        attempt = record_attempt(
            session=session, job_id=job_id, trajectory_id=None, tool=tool,
            source=source if source is not None else f"# candidate {time.monotonic_ns()}\nclass ModelNew: ...\n",
            parent_id=None, verdict_dict=verdict_dict,
        )
        if tokens or cost_usd:
            add_job_usage(session=session, job_id=job_id, tokens_in=tokens, tokens_out=tokens // 4, cost_usd=cost_usd)
        return attempt.seq


def finish(factory: sessionmaker[Session], job_id: int, state: JobState = JobState.SUCCEEDED,
           error: str | None = None) -> None:
    with session_scope(factory) as session:
        finish_job(session=session, job_id=job_id, worker_id=WORKER_ID, state=state, error=error)


def seed_attempts(factory: sessionmaker[Session], job_id: int, speedups: Sequence[float | None]) -> None:
    """Attempts with these speedups vs eager (``None``: a failed one), eager at 4 ms."""
    for i, speedup in enumerate(speedups):
        if speedup is None:
            status = Status.ERROR if i % 2 else Status.FAIL
            add_attempt(factory, job_id, verdict(status), tokens=9_000, cost_usd=0.02)
        else:
            add_attempt(factory, job_id, verdict(median_ms=4.0 / speedup), tokens=12_000, cost_usd=0.03)


@contextmanager
def live_service(directory: Path, **settings: Any) -> Iterator[Service]:
    """The API under uvicorn in a thread, on a fresh migrated SQLite database, with one key."""
    url, factory = migrated_factory(directory)
    key_id, key = create_key(factory)
    app = create_app(
        Settings(_env_file=None, database_url=url, data_dir=directory, **settings),  # type: ignore[call-arg]
        dispatcher=NullDispatcher(),
        stream_options=STREAM_OPTIONS,
    )
    # IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    # A stream a test left open must not hold the shutdown for long.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    assert httpx.get(f"{base}/health").status_code == 200
    try:
        yield Service(base_url=base, factory=factory, key=key, key_id=key_id)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
        factory.kw["bind"].dispose()
