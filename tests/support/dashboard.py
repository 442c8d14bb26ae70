"""A live kernelloop API for the dashboard's and the CLI's tests: uvicorn on 127.0.0.1 (a free
port) against a migrated SQLite file, an API key, and jobs and attempts written straight into the
store with real harness `Verdict`s (no worker runs); signing in, and the headless Chromium the
browser tests drive.

Chromium and chromedriver come from Debian (`scripts/ensure-browser` installs them); when they
are missing the browser tests fail with that hint rather than skip.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from api import NullDispatcher, StreamOptions, create_app
from config import Settings
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
    source_sha256,
)
from store.migrate import upgrade
from tests.support.api import serve
from tests.support.databases import sqlite_url_in
from tests.support.paths import REPO
from vocabulary.builds import CompileResult, KernelInfo
from vocabulary.events import EventType
from vocabulary.provenance import Provenance
from vocabulary.stages import StageSeconds
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import ErrorKind, Stage, Status, Trial, Verdict

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
    depth: str = "benchmark",
    stage_seconds: StageSeconds | None = None,
) -> dict[str, Any]:
    """A real ``Verdict.to_dict()`` with the figures a timed evaluation has (and ``stage_seconds``)."""
    correct = status in (Status.PASS, Status.SUSPICIOUS)
    failed_stage = Stage.COMPILE if status is Status.ERROR else Stage.CORRECTNESS
    v = Verdict(
        status=status,
        stage=stage or (Stage.DONE if correct else failed_stage),
        error_kind=None if correct else ErrorKind.CANDIDATE,
        message=message or _FAILURE_MESSAGES.get(status, ""),
        compile=CompileResult(
            ok=status is not Status.ERROR, seconds=41.2,
            kernels=() if status is Status.ERROR else (
                KernelInfo(kernel="pool_tanh_scale_bias_kernel<4, 4, int>", registers=40, spill_stores=0,
                           spill_loads=0),),
        ),
        trials=tuple(
            Trial(seed_index=i, passed=correct, max_abs_err=1e-6 if correct else 0.31, mean_abs_err=1e-7,
                  mismatch_frac=0.0 if correct else 0.2)
            for i in range(3)
        ) if status is not Status.ERROR else (),
        timing=_timing(median_ms) if (correct and median_ms is not None) else None,
        baselines=Baselines(eager=_timing(eager_ms), torch_compile=_timing(compile_ms)) if correct else None,
        sol_ms=0.21,
        flops=4.83e9,
        min_bytes=3.1e8,
        provenance=Provenance(device=device, target=target, torch="2.11.0", cuda="13.0", harness="0.1.0"),
        depth=depth,
        stage_seconds=stage_seconds or StageSeconds(),
    )
    return v.to_dict()


def migrated_factory(directory: Path) -> tuple[str, sessionmaker[Session]]:
    directory.mkdir(parents=True, exist_ok=True)
    url = sqlite_url_in(directory)
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
    llm: tuple[str, str] = ("scripted", "scripted"),
) -> int:
    """A job as a worker holds it: created, then claimed by `WORKER_ID` (``llm``: profile, model)."""
    with session_scope(factory) as session:
        job = create_job(
            session=session,
            problem_id=store_problem(session, load_problem(problem)),
            target=target,
            owner_id=owner_id,
            llm_profile=llm[0],
            llm_model=llm[1],
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
            parent_id=None, verdict=Verdict.from_dict(verdict_dict),
        )
        if tokens or cost_usd:
            add_job_usage(session=session, job_id=job_id, tokens_in=tokens, tokens_out=tokens // 4, cost_usd=cost_usd)
        return attempt.n


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
    try:
        with serve(app) as base:
            yield Service(base_url=base, factory=factory, key=key, key_id=key_id)
    finally:
        factory.kw["bind"].dispose()


def login(client: httpx.Client, key: str, next_path: str = "/dashboard") -> httpx.Response:
    """Sign in through the login form (its CSRF token included), as a person does."""
    form = client.get("/login", params={"next": next_path})
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert token, form.text
    return client.post("/login", data={"api_key": key, "csrf_token": token.group(1), "next": next_path})


# -- the browser ---------------------------------------------------------------------------------

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROME_ARGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1280,1000", "--force-device-scale-factor=1", "--hide-scrollbars",
)


def chromium() -> str:
    """The Chromium binary on PATH (the test fails with the hint to install it when there is none)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no chromium on PATH: run scripts/ensure-browser (apt-get install chromium chromium-driver)")


# -- an agent's session, as the worker records it ------------------------------------------------

SEED1_CUDA = (REPO / "examples" / "seed1_cuda.py").read_text()


def kernel_variant(threads: int = 256, *, broken: bool = False, note: str = "") -> str:
    """seed1_cuda.py with another block size (and optionally a compile error): sources that differ
    by a few lines, as an agent's successive edits do."""
    source = SEED1_CUDA.replace("const int threads = 256;", f"const int threads = {threads};")
    if broken:
        source = source.replace("const int threads =", "const int threads = TILE *", 1)
    if note:
        source = source.replace('CUDA_SOURCE = r"""\n', f'CUDA_SOURCE = r"""\n// {note}\n', 1)
    return source


@contextmanager
def worker_recorder(factory: sessionmaker[Session], job_id: int) -> Iterator[Any]:
    """The worker's own `StoreRecorder` for a job claimed by `WORKER_ID` (trajectories, messages,
    attempts and their events, exactly as a worker writes them)."""
    from worker.lease import LeaseKeeper
    from worker.recorder import StoreRecorder

    keeper = LeaseKeeper(session_factory=factory, job_id=job_id, worker_id=WORKER_ID, lease_seconds=3600,
                         interval_s=60)
    yield StoreRecorder(session_factory=factory, job_id=job_id, worker_id=WORKER_ID, lease_seconds=3600,
                        lease=keeper)


def stage_event(factory: sessionmaker[Session], job_id: int, stage: str, phase: str, seconds: float = 0.0,
                *, at: datetime | None = None, **extra: Any) -> None:
    """A ``stage`` event as the worker appends it for the referee's steps (`harness.progress`):
    ``{"stage", "phase", "seconds", "at"}``."""
    from store import append_event

    when = at or datetime.now(UTC)
    with session_scope(factory) as session:
        append_event(session=session, job_id=job_id, type=EventType.STAGE,
                     payload={"stage": stage, "phase": phase, "seconds": seconds, "at": when.isoformat(), **extra})


def _call(name: str, source: str | None = None) -> list[dict[str, Any]]:
    arguments = "{}" if source is None else '{"source": "…"}'
    return [{"id": f"call_{name}_{time.monotonic_ns()}", "type": "function",
             "function": {"name": name, "arguments": arguments}}]


@dataclass(frozen=True)
class Turn:
    """One tool call of a scripted session: the assistant's words, the tool, the source, the verdict."""

    text: str
    tool: str
    source: str | None = None
    verdict: dict[str, Any] | None = None
    parent: str | None = None
    feedback: str = ""


def agent_session(threads: int = 256, tag: str = "") -> list[Turn]:
    """A realistic trajectory: specs, a compile error, a wrong kernel, a slow one, a profile, a fast one
    (``tag`` makes its sources its own)."""
    broken = kernel_variant(128, broken=True, note=f"draft{tag}")
    wrong = kernel_variant(64, note=f"second try{tag}")
    slow = kernel_variant(1024, note=f"third try{tag}")
    fast = kernel_variant(threads, note=f"vectorised{tag}")
    compile_error = verdict(Status.ERROR, depth="compile",
                            message="compile failed: kernel.cu(74): error: identifier \"TILE\" is undefined")
    compile_error["compile"]["errors"] = (
        "kernel.cu(74): error: identifier \"TILE\" is undefined\n"
        "    const int threads = TILE * 128;\n"
        "                        ^\n\n1 error detected in the compilation of \"kernel.cu\"."
    )
    untimed = verdict(Status.PASS, median_ms=None)
    untimed["depth"] = "profile"
    # As the harness writes it: device milliseconds per forward, the candidate's kernel among cuDNN's.
    untimed["profile"] = [
        {"name": "void pool_tanh_scale_bias_kernel<4, 4, int>(float const*, float const*, float*, int, int)",
         "calls": 1, "ms_per_forward": 0.705},
        {"name": "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc", "calls": 1, "ms_per_forward": 3.05},
        {"name": "aten::convolution", "calls": 1, "ms_per_forward": 3.12}]
    return [
        Turn("Let me look at the GPU first.", "get_gpu_specs", feedback="NVIDIA H200: 132 SMs, 4.8 TB/s"),
        Turn("Shapes: 256→254 after the 3×3 conv, 254→63 after the 4×4 pool; memory-bound. A first fused "
             "pool-first epilogue with a large block.", "compile", broken, compile_error),
        Turn("TILE was never defined; fixed. Checking correctness with another block size.", "check_correctness",
             wrong, verdict(Status.FAIL, depth="correctness"), parent=broken),
        Turn("Trial 1 is off: the window loop skipped the last column. Fixed and timed.", "benchmark", slow,
             verdict(median_ms=4.0 / 0.82), parent=wrong),
        Turn("Slower than eager. Profiling to see where the time goes.", "profile", slow, untimed, parent=slow),
        Turn(f"The epilogue kernel is 19 % of the time; {threads} threads per block and vectorised loads.",
             "benchmark", fast, verdict(median_ms=4.0 / 2.36), parent=slow),
    ]


def record_session(recorder: Any, trajectory_index: int, turns: Sequence[Turn], *, user_prompt: str) -> None:
    """Write a scripted trajectory through the recorder: messages, tool results and attempts."""
    recorder.message(trajectory_index=trajectory_index, role="system", content="You write CUDA kernels that replace a "
                     "PyTorch reference model. Contract: weights, mode, inputs, tolerances …", tokens_in=0)
    recorder.message(trajectory_index=trajectory_index, role="user", content=user_prompt)
    for turn in turns:
        calls = _call(turn.tool, turn.source)
        recorder.message(trajectory_index=trajectory_index, role="assistant", content=turn.text, tool_calls=calls,
                         tokens_in=6_000, tokens_out=900, latency_ms=2_400.0, cost_usd=0.012)
        if turn.source is not None and turn.verdict is not None:
            parent = None if turn.parent is None else source_sha256(turn.parent)
            recorder.attempt(trajectory_index=trajectory_index, tool=turn.tool, source=turn.source,
                             parent_sha256=parent, verdict=Verdict.from_dict(turn.verdict))
            feedback = turn.feedback or f"{turn.verdict['status']}: {turn.verdict['message'] or 'correct'}"
        else:
            feedback = turn.feedback
        recorder.message(trajectory_index=trajectory_index, role="tool", content=feedback, tool_call_id=calls[0]["id"])
