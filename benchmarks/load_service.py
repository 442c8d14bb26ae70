"""Load run: concurrent submissions and live SSE watchers against the real API, over HTTP.

Two setups, each started from scratch by this script on 127.0.0.1 and stopped at the end:

- ``embedded``: what ``kernelloop up`` runs: SQLite (WAL) in a temporary data directory, the API
  (``python -m cli.service serve``, no broker: `api.dispatch.NullDispatcher`) and embedded
  workers polling the database (`worker.embedded.EmbeddedWorker`);
- ``distributed``: a throwaway PostgreSQL database, Redis (database 13), the API with its
  `api.dispatch.CeleryDispatcher`, and Celery workers (``kernelloop worker``: solo pool,
  concurrency 1).

``--submitters`` client processes (`benchmarks.load_client`, a connection per submission) send
``--jobs`` submissions at once (``--rate`` spreads them instead); this script opens a watcher
(``GET /jobs/{id}/events``, httpx) on every ``jobs/watchers``-th job as soon as its ``202`` is
back; each watcher reads until the stream's ``end``. Then the store is read
directly and compared with what the watchers got: the same event ids and types, in order, none
missing; the lag of each event is its arrival at the watcher minus its ``created_at`` in the
store (same machine, same clock).

Job bodies (``--body``):

- ``double`` (default): agent jobs (``POST /jobs``) run by the real worker code with the agent
  replaced by `benchmarks.load_double`: ten real events per job in about 0.3 s, no harness
  subprocess. The run then measures the service (API, store, queue, streams), not the CPU cost
  of sandboxed Python processes, which on a small machine would swamp every other figure;
- ``evaluation``: ``POST /evaluations`` of a candidate that raises at import, judged by the real
  referee (sandboxed reference and candidate processes): the production path end to end,
  seconds of CPU per job.

Every wait is bounded (``--deadline-s`` for the whole measured phase, 60 s for start-up), and
nothing but 127.0.0.1 is contacted. ``python -m benchmarks.load_service --help``;
benchmarks/README.md has the commands, benchmarks/results/load_service.md the last figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import itertools
import json
import math
import os
import platform
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from store import Job, JobEvent, JobState, create_api_key, make_engine, make_session_factory, session_scope
from store.migrate import upgrade

__all__ = ["LoadConfig", "SetupResult", "main", "run_setup"]

REPO = Path(__file__).resolve().parents[1]
#: The only address this script sends anything to.
HOST = "127.0.0.1"
SETUPS = ("embedded", "distributed")
PROBLEM_ID = "level2/conv_tanh_scale_bias_maxpool"
FAILING_CANDIDATE = 'raise RuntimeError("load run: this candidate fails at import")\n\n\nclass ModelNew:\n    pass\n'
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
#: Redis database 13: the worker tests use 14; this one is flushed before and after a run.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/13"
#: The targets of issue 4.
EVENT_LAG_P99_TARGET_S = 1.0
SUBMIT_P99_TARGET_S = 0.25
#: Start-up bounds: the API answering /health (generous: imports on a machine busy with other
#: work), then the services' CPU settling (the run goes on after it).
STARTUP_TIMEOUT_S = 120.0
IDLE_TIMEOUT_S = 30.0
#: A worker is considered started once its CPU time grows by less than this over a second.
_IDLE_CPU_S = 0.05
_RESULTS = REPO / "benchmarks" / "results"
#: A watcher whose connection drops reconnects with Last-Event-ID, like a browser, this often at most.
_MAX_RECONNECTS = 3
_RECONNECT_DELAY_S = 0.1


@dataclass(frozen=True)
class LoadConfig:
    """One load run's shape."""

    jobs: int = 200
    watchers: int = 50
    #: Worker processes (each runs one job at a time, as in production).
    workers: int = 2
    #: API keys the submissions are spread over (round robin): 1 is one client's burst, where
    #: every submission waits for the key's quota lock; more are as many clients.
    keys: int = 1
    body: str = "double"
    #: Submissions per second; ``None``: all at once.
    rate: float | None = None
    #: Bound of the measured phase: submissions, streams and the wait for every job to finish.
    deadline_s: float = 300.0
    #: Submissions sent one by one before the measured phase (their jobs run to the end first),
    #: each on a new connection: 0 measures a service that has just started, cold caches and
    #: connections included. With N API processes, 8N warm nearly surely every one of them.
    warmup: int = 0
    #: API processes (``kernelloop serve --workers``).
    api_workers: int = 1
    #: Client processes sending the submissions (`benchmarks.load_client`), round robin (at
    #: most one per submission).
    submitters: int = 4
    #: Settings of the services (``config.Settings`` field, value), e.g. ``("api_submit_batch_max", "10")``:
    #: set as ``KERNELLOOP_<FIELD>`` in their environment.
    settings: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.keys <= self.jobs:
            raise ValueError(f"keys must be between 1 and jobs ({self.jobs}), got {self.keys}")
        if not 1 <= self.watchers <= self.jobs:
            raise ValueError(f"watchers must be between 1 and jobs ({self.jobs}), got {self.watchers}")
        if self.body not in ("double", "evaluation"):
            raise ValueError(f"body is 'double' or 'evaluation', not {self.body!r}")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be positive, got {self.rate}")
        if self.submitters < 1:
            raise ValueError(f"submitters must be at least 1, got {self.submitters}")
        if self.api_workers < 1:
            raise ValueError(f"api_workers must be at least 1, got {self.api_workers}")
        for name, _ in self.settings:
            if not name.isidentifier():
                raise ValueError(f"a setting is a field name of config.Settings, not {name!r}")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class WatcherLog:
    job_id: int
    #: The key that submitted the job (a key sees only its own jobs).
    key: str = field(repr=False)
    #: When the stream's headers arrived (wall clock, s).
    opened_at: float | None = None
    #: ``(event id, type, arrival wall clock)`` in arrival order.
    events: list[tuple[int, str, float]] = field(default_factory=list)
    #: Why the stream had to be opened again, each time (an ``EventSource`` reconnects by itself).
    reconnects: list[str] = field(default_factory=list)
    ended: bool = False
    error: str | None = None


@dataclass
class SetupResult:
    """What one setup did: raw samples, and the figures derived from them."""

    setup: str
    config: LoadConfig
    #: Seconds from sending each submission to its response, in submission order.
    submit_s: list[float] = field(default_factory=list)
    #: Lag (s) of every event a watcher received; ``live_lag_s`` only of those created after its
    #: stream opened (the others were history the stream caught up on).
    lag_s: list[float] = field(default_factory=list)
    live_lag_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    watchers_complete: int = 0
    watchers_in_order: int = 0
    events_received: int = 0
    events_expected: int = 0
    #: Streams opened again after a drop (with Last-Event-ID), and why.
    reconnects: list[str] = field(default_factory=list)
    jobs_by_state: dict[str, int] = field(default_factory=dict)
    #: From the first submission sent to the last job finished.
    drain_s: float = 0.0
    #: CPU seconds of the service processes during the measured phase (``client``: this script's
    #: and its submitting clients').
    cpu_s: dict[str, float] = field(default_factory=dict)
    #: The same for each API process alone, most first: how evenly the connections were spread.
    api_cpu_by_process_s: list[float] = field(default_factory=list)
    #: Each answered submission's ``Server-Timing`` phases (ms; ``app``: the API's whole time)
    #: and ``outside``: its latency at the client minus ``app`` (connection, HTTP, the event loop).
    server_timing_ms: list[dict[str, float]] = field(default_factory=list)
    #: How many of the measured submissions each transaction stored (PostgreSQL only), most first.
    submissions_per_transaction: list[int] = field(default_factory=list)
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: The load average just before the measured phase: what else was running (other engineers'
    #: tests share this machine).
    load_average_before: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def submit_p50_s(self) -> float | None:
        return percentile(self.submit_s, 50)

    @property
    def submit_p99_s(self) -> float | None:
        return percentile(self.submit_s, 99)

    @property
    def lag_p50_s(self) -> float | None:
        return percentile(self.lag_s, 50)

    @property
    def lag_p99_s(self) -> float | None:
        return percentile(self.lag_s, 99)

    @property
    def live_lag_p99_s(self) -> float | None:
        return percentile(self.live_lag_s, 99)

    @property
    def passed(self) -> dict[str, bool]:
        watchers = self.config.watchers
        lag = self.lag_p99_s
        checks = {
            "zero errors": not self.errors,
            "every watcher got every event in order": self.watchers_complete == watchers
            and self.watchers_in_order == watchers,
            "p99 event lag < 1 s": lag is not None and lag < EVENT_LAG_P99_TARGET_S,
        }
        if self.setup == "distributed":
            p99 = self.submit_p99_s
            checks["p99 submission < 250 ms"] = p99 is not None and p99 < SUBMIT_P99_TARGET_S
        return checks

    def to_dict(self) -> dict[str, Any]:
        derived = {name: getattr(self, name) for name in
                   ("submit_p50_s", "submit_p99_s", "lag_p50_s", "lag_p99_s", "live_lag_p99_s", "passed")}
        return {**asdict(self), **derived}


# -- processes -------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _session_cpu_seconds(pid: int) -> dict[int, float]:
    """User + system CPU of a process and of each live process of its session (the API
    processes of ``serve --workers``; it was started with ``start_new_session``), by pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[3] is the session id; utime and stime are fields[11] and fields[12].
        if int(entry.name) == pid or int(fields[3]) == pid:
            found[int(entry.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def _client_cpu_seconds() -> float:
    """This script's CPU and its ended children's (the submitting clients, once waited for)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In a child, before exec: the kernel sends it SIGTERM when this script dies, however it dies.

    Left behind, a setup's Celery workers would go on consuming the shared Redis queue of the
    next run and claim its job ids in their own (dropped) database: the next run's jobs would
    never run.
    """
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwind: stop the services, drop the database


class Processes:
    """The service processes of one setup, in their own process groups; killed by id at the end."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self._env = env
        self._log_dir = log_dir
        self.started: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (self._log_dir / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(argv, cwd=REPO, env=self._env, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True, preexec_fn=_die_with_parent)
        self.started[name] = process
        return process

    def cpu(self) -> dict[str, float]:
        """CPU seconds of each service (its whole session): 0 once it is gone."""
        return {name: sum(_session_cpu_seconds(p.pid).values()) for name, p in self.started.items()}

    def cpu_by_process(self, name: str) -> dict[int, float]:
        """CPU seconds of each process of one service's session but the first (its supervisor)."""
        pid = self.started[name].pid
        return {p: cpu for p, cpu in _session_cpu_seconds(pid).items() if p != pid}

    def check_alive(self) -> None:
        for name, process in self.started.items():
            if process.poll() is not None:
                log = (self._log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{log}")

    def wait_idle(self, names: Sequence[str], timeout: float) -> bool:
        """Until the named processes stop burning CPU (done importing, connected); ``False`` if
        they never looked idle within ``timeout`` (on a machine busy with other work, a second's
        CPU is a noisy reading): the run goes on, the start-up then counts in its CPU figures."""
        deadline = time.monotonic() + timeout
        previous = self.cpu()
        while time.monotonic() < deadline:
            time.sleep(1.0)
            self.check_alive()
            now = self.cpu()
            if all(now[n] - previous[n] < _IDLE_CPU_S for n in names):
                return True
            previous = now
        print(f"{', '.join(names)}: still busy after {timeout:.0f} s; going on", file=sys.stderr, flush=True)
        return False

    def stop(self) -> None:
        for process in self.started.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.started.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


@contextlib.contextmanager
def _throwaway_postgres(base_url: str) -> Iterator[str]:
    base = make_url(base_url)
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    name = f"kl_load_{secrets.token_hex(4)}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield base.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@contextlib.contextmanager
def _empty_redis(url: str) -> Iterator[str]:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
        yield url
    finally:
        client.flushdb()
        client.close()


def _service_env(*, data_dir: Path, database_url: str, broker_url: str | None,
                 settings: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")}
    env.update({f"KERNELLOOP_{name.upper()}": value for name, value in settings})
    cache = os.environ.get("KERNELLOOP_TEST_CACHE") or str(data_dir / "cache")
    env.update({
        "KERNELLOOP_DATA_DIR": str(data_dir),
        "KERNELLOOP_DATABASE_URL": database_url,
        "KERNELLOOP_CACHE_DIR": cache,
        "KERNELLOOP_WORKER_TARGET": "cpu",
        "PYTHONUNBUFFERED": "1",
    })
    if broker_url:
        env["KERNELLOOP_BROKER_URL"] = broker_url
    return env


def _worker_argv(setup: str, body: str, index: int) -> list[str]:
    py = sys.executable
    if body == "double":
        if setup == "embedded":
            return [py, "-m", "benchmarks.load_worker", "embedded"]
        return [py, "-m", "benchmarks.load_worker", "celery", "--name", f"load{index}"]
    if setup == "embedded":
        return [py, "-m", "worker.embedded", "--target", "cpu"]
    return [py, "-m", "cli.service", "worker", "--queue", "cpu", "--loglevel", "WARNING"]


def _api_keys(database_url: str, count: int) -> list[str]:
    engine = make_engine(database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            # Quotas far above the run: the run measures the service, not the quota refusals.
            return [create_api_key(session=session, name=f"load{i}", owner=f"load{i}", max_concurrent_jobs=100_000,
                                   max_jobs_per_day=1_000_000, cost_cap_usd=None).plaintext for i in range(count)]
    finally:
        engine.dispose()


def _wait_healthy(base_url: str, processes: Processes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        processes.check_alive()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base_url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.3)
    raise RuntimeError(f"the API at {base_url} did not answer /health within {timeout:.0f} s")


# -- the client ------------------------------------------------------------------------------------


def _submission(body: str) -> tuple[str, dict[str, Any]]:
    if body == "double":
        return "/jobs", {"problem_id": PROBLEM_ID, "target": "cpu", "budgets": {"turns": 3}}
    return "/evaluations", {"problem_id": PROBLEM_ID, "target": "cpu", "candidate_source": FAILING_CANDIDATE}


async def _watch(client: httpx.AsyncClient, log: WatcherLog) -> None:
    """Read the job's stream to its ``end``, as a browser's ``EventSource`` does: a connection
    that drops is opened again with ``Last-Event-ID`` (at most ``_MAX_RECONNECTS`` times, each
    one counted and reported)."""
    fields: dict[str, str] = {}
    while True:
        headers = {"X-API-Key": log.key}
        if log.events:
            headers["Last-Event-ID"] = str(log.events[-1][0])
        try:
            async with client.stream("GET", f"/jobs/{log.job_id}/events", headers=headers) as response:
                if response.status_code != 200:
                    log.error = f"GET /jobs/{log.job_id}/events: {response.status_code}"
                    return
                if log.opened_at is None:
                    log.opened_at = time.time()
                fields = {}
                async for line in response.aiter_lines():
                    if line:
                        if not line.startswith(":"):
                            name, _, value = line.partition(":")
                            fields[name] = value[1:] if value.startswith(" ") else value
                        continue
                    arrived = time.time()
                    if fields.get("event") == "end":
                        log.ended = True
                        return
                    if "id" in fields:
                        log.events.append((int(fields["id"]), fields.get("event", "message"), arrived))
                    fields = {}
            problem = "the stream closed without an end event"
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if len(log.reconnects) >= _MAX_RECONNECTS:
            log.error = f"job {log.job_id}: {problem} (after {len(log.reconnects)} reconnects)"
            return
        log.reconnects.append(problem)
        await asyncio.sleep(_RECONNECT_DELAY_S)


def _server_timing(header: str) -> dict[str, float]:
    """``Server-Timing: app;dur=12.5, queue;dur=3.1`` as ``{"app": 12.5, "queue": 3.1}`` (ms)."""
    phases = {}
    for entry in filter(None, (e.strip() for e in header.split(","))):
        name, _, duration = entry.partition(";dur=")
        with contextlib.suppress(ValueError):
            phases[name] = float(duration)
    return phases


async def _start_submitters(port: int, keys: Sequence[str], config: LoadConfig) -> list[asyncio.subprocess.Process]:
    """Start the submitting clients (`benchmarks.load_client`), each with its share of the
    submissions (round robin), and wait until every one is ready to send."""
    path, body = _submission(config.body)
    submitters = []
    for n in range(min(config.submitters, config.jobs)):
        share = [[i, keys[i % len(keys)]] for i in range(n, config.jobs, config.submitters)]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.load_client", cwd=REPO,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert process.stdin is not None and process.stdout is not None
        order = {"port": port, "path": path, "payload": json.dumps(body), "rate": config.rate, "jobs": share}
        process.stdin.write(json.dumps(order).encode() + b"\n")
        submitters.append(process)
    for process in submitters:
        assert process.stdout is not None
        if json.loads(await process.stdout.readline() or b"{}") != {"ready": True}:
            raise RuntimeError("a submitting client did not start")
    return submitters


async def _drive(base_url: str, keys: Sequence[str], config: LoadConfig, result: SetupResult) -> list[WatcherLog]:
    """Send the submissions from ``config.submitters`` client processes and open a watcher on
    every ``stride``-th job as soon as its ``202`` is back; until every stream has ended."""
    stride = config.jobs // config.watchers
    watchers: list[WatcherLog] = []
    watch_tasks: list[asyncio.Task[None]] = []
    latencies: list[float | None] = [None] * config.jobs
    timeout = httpx.Timeout(30.0, read=60.0)  # streams send a keep-alive every 15 s
    port = int(base_url.rsplit(":", 1)[1])
    submitters = await _start_submitters(port, keys, config)
    # Submitters (a connection each) and watchers (httpx, as an EventSource reads a stream) are
    # different clients, as they would be (scripts, browsers).
    # No keep-alive: a stream that ended leaves no idle connection for the next watcher to reuse
    # just as uvicorn closes it (5 s idle timeout), a race that reads as a dropped stream.
    viewers = httpx.AsyncClient(base_url=base_url, timeout=timeout,
                                limits=httpx.Limits(max_connections=config.watchers, max_keepalive_connections=0))

    async def collect(process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            answer = json.loads(line)
            i = answer["i"]
            if "error" in answer:
                result.errors.append(f"submission {i}: {answer['error']}")
                continue
            latencies[i] = answer["latency_s"]
            phases = _server_timing(answer.get("server_timing", ""))
            if "app" in phases:
                phases["outside"] = answer["latency_s"] * 1000 - phases["app"]
                result.server_timing_ms.append(phases)
            if answer["status"] != 202:
                result.errors.append(f"submission {i}: {answer['status']} {answer['body'][:200]}")
                continue
            if i % stride == 0 and len(watchers) < config.watchers:
                log = WatcherLog(job_id=int(json.loads(answer["body"])["id"]), key=keys[i % len(keys)])
                watchers.append(log)
                watch_tasks.append(asyncio.create_task(_watch(viewers, log)))
        if await process.wait() != 0:
            result.errors.append(f"a submitting client exited with {process.returncode}")

    async with viewers:
        try:
            go = json.dumps({"go": time.time() + 0.05}).encode() + b"\n"
            for process in submitters:
                assert process.stdin is not None
                process.stdin.write(go)
                process.stdin.close()
            await asyncio.gather(*(collect(process) for process in submitters))
            if watch_tasks:
                await asyncio.wait(watch_tasks)
        finally:
            for process in submitters:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
    result.submit_s = [s for s in latencies if s is not None]
    return watchers


def _warm_up(base_url: str, key: str, config: LoadConfig, database_url: str) -> None:
    path, body = _submission(config.body)
    # A connection each (no keep-alive): the kernel spreads them over the API processes, so each
    # is warm, not only the one a kept-alive connection would have reached.
    with httpx.Client(base_url=base_url, headers={"X-API-Key": key}, timeout=30,
                      limits=httpx.Limits(max_keepalive_connections=0)) as client:
        for _ in range(config.warmup):
            client.post(path, json=body).raise_for_status()
    _wait_finished(database_url, config.warmup, time.monotonic() + config.deadline_s)


def _verify(database_url: str, watchers: Sequence[WatcherLog], result: SetupResult) -> None:
    """Compare each watcher's events with the store's; collect lags."""
    engine = make_engine(database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            for log in watchers:
                result.reconnects += [f"job {log.job_id}: {why}" for why in log.reconnects]
                if log.error:
                    result.errors.append(log.error)
                elif not log.ended:
                    result.errors.append(f"job {log.job_id}: no end event")
                stored = session.execute(
                    select(JobEvent.id, JobEvent.type, JobEvent.created_at)
                    .where(JobEvent.job_id == log.job_id).order_by(JobEvent.id)
                ).all()
                got = [(event_id, kind) for event_id, kind, _ in log.events]
                result.events_expected += len(stored)
                result.events_received += len(got)
                ids = [event_id for event_id, _ in got]
                if all(b > a for a, b in itertools.pairwise(ids)):
                    result.watchers_in_order += 1
                if got == [(row.id, row.type) for row in stored]:
                    result.watchers_complete += 1
                else:
                    result.errors.append(f"job {log.job_id}: received {ids}, stored {[row.id for row in stored]}")
                created = {row.id: row.created_at.timestamp() for row in stored}
                for event_id, _, arrived in log.events:
                    if event_id not in created:
                        continue
                    lag = arrived - created[event_id]
                    result.lag_s.append(lag)
                    if log.opened_at is not None and created[event_id] >= log.opened_at:
                        result.live_lag_s.append(lag)
    finally:
        engine.dispose()


def _submissions_per_transaction(database_url: str, *, first_job: int) -> list[int]:
    """How the jobs from ``first_job`` on were grouped into transactions by the API's writers:
    a job's ``queued`` event is inserted with it and never updated, so its row's ``xmin`` (the
    inserting transaction, PostgreSQL) tells the batch apart (the job row itself is updated as it runs)."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT count(*) FROM job_events WHERE id = 1 AND job_id >= :first GROUP BY xmin::text"
            ), {"first": first_job}).scalars().all()
        return sorted((int(n) for n in rows), reverse=True)
    finally:
        engine.dispose()


def _wait_finished(database_url: str, jobs: int, deadline: float) -> dict[str, int]:
    engine = make_engine(database_url)
    terminal = [s for s in JobState if s.is_terminal]
    try:
        factory = make_session_factory(engine)
        while True:
            with session_scope(factory) as session:
                counts = {str(state.value): int(n) for state, n in
                          session.execute(select(Job.state, func.count()).group_by(Job.state))}
            if sum(counts.get(s.value, 0) for s in terminal) >= jobs or time.monotonic() > deadline:
                return counts
            time.sleep(0.25)
    finally:
        engine.dispose()


# -- one setup -------------------------------------------------------------------------------------


def run_setup(
    setup: str, config: LoadConfig, *, postgres_url: str, redis_url: str, keep_logs: Path | None
) -> SetupResult:
    """Start the setup's services, run the load, verify against the store, stop everything."""
    result = SetupResult(setup=setup, config=config)
    with tempfile.TemporaryDirectory(prefix=f"kl-load-{setup}-") as tmp, contextlib.ExitStack() as stack:
        data_dir = Path(tmp)
        if setup == "embedded":
            database_url, broker_url = f"sqlite:///{data_dir / 'kernelloop.db'}", None
        else:
            database_url = stack.enter_context(_throwaway_postgres(postgres_url))
            broker_url = stack.enter_context(_empty_redis(redis_url))
        upgrade(database_url)
        keys = _api_keys(database_url, config.keys)
        env = _service_env(data_dir=data_dir, database_url=database_url, broker_url=broker_url,
                           settings=config.settings)
        processes = Processes(env, data_dir)
        port = _free_port()
        base_url = f"http://{HOST}:{port}"
        try:
            processes.start("api", [sys.executable, "-m", "cli.service", "serve", "--host", HOST, "--port", str(port),
                                    "--workers", str(config.api_workers)])
            for i in range(config.workers):
                processes.start(f"worker{i}", _worker_argv(setup, config.body, i))
            _wait_healthy(base_url, processes, STARTUP_TIMEOUT_S)
            processes.wait_idle(list(processes.started), IDLE_TIMEOUT_S)
            if config.warmup:
                _warm_up(base_url, keys[0], config, database_url)
            result.load_average_before = os.getloadavg()
            cpu_before = {**processes.cpu(), "client": _client_cpu_seconds()}
            api_before = processes.cpu_by_process("api")
            started = time.monotonic()
            deadline = started + config.deadline_s
            try:
                watchers = asyncio.run(asyncio.wait_for(_drive(base_url, keys, config, result), config.deadline_s))
            except TimeoutError:
                result.errors.append(f"the run did not finish within {config.deadline_s:.0f} s")
                watchers = []
            result.jobs_by_state = _wait_finished(database_url, config.jobs + config.warmup, deadline)
            result.drain_s = time.monotonic() - started
            cpu_after = {**processes.cpu(), "client": _client_cpu_seconds()}
            result.cpu_s = {name: round(cpu_after[name] - cpu_before[name], 2) for name in cpu_before}
            api_after = processes.cpu_by_process("api")
            result.api_cpu_by_process_s = sorted(
                (round(cpu - api_before.get(pid, 0.0), 2) for pid, cpu in api_after.items()), reverse=True)
            result.load_average = os.getloadavg()
            processes.check_alive()
        finally:
            processes.stop()
            if keep_logs is not None:
                keep_logs.mkdir(parents=True, exist_ok=True)
                for log in data_dir.glob("*.log"):
                    shutil.copy(log, keep_logs / f"{setup}-{log.name}")
        _verify(database_url, watchers, result)
        if setup == "distributed":
            result.submissions_per_transaction = _submissions_per_transaction(database_url, first_job=config.warmup + 1)
        finished = sum(n for state, n in result.jobs_by_state.items() if JobState(state).is_terminal)
        if finished < config.jobs + config.warmup:
            result.errors.append(f"only {finished} of {config.jobs + config.warmup} jobs finished (warm-up "
                                 f"included): {result.jobs_by_state}")
        unexpected = {s: n for s, n in result.jobs_by_state.items() if s != JobState.SUCCEEDED.value}
        if unexpected:
            result.errors.append(f"jobs that did not succeed: {unexpected}")
    return result


# -- report ----------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value * 1000:.0f} ms"


def _scenario(config: LoadConfig) -> str:
    arrival = "all at once" if config.rate is None else f"at {config.rate:g}/s"
    start = f"after {config.warmup} warm-up submissions" if config.warmup else "cold (services just started)"
    api = f", {config.api_workers} API processes" if config.api_workers > 1 else ""
    settings = "".join(f", {name}={value}" for name, value in config.settings)
    return f"{config.jobs} submissions {arrival} from {config.keys} key(s){api}{settings}, {start}"


#: The submission phases reported (`api.submissions`' ``Server-Timing``, and the rest).
_PHASES = ("app", "queue", "store", "locks", "announce", "outside")


def _phase_ms(result: SetupResult, phase: str) -> str:
    values = [t[phase] for t in result.server_timing_ms if phase in t]
    if not values:
        return "–"
    return f"{percentile(values, 50):.0f} / {percentile(values, 99):.0f} ms"


def _table(results: Sequence[SetupResult]) -> list[str]:
    rows: list[tuple[str, list[str]]] = [
        ("submissions answered 202", [f"{len(r.submit_s)} / {r.config.jobs}" for r in results]),
        ("submission p50", [_ms(r.submit_p50_s) for r in results]),
        ("submission p99 (target < 250 ms on Redis/PostgreSQL)", [_ms(r.submit_p99_s) for r in results]),
        ("submission max", [_ms(max(r.submit_s, default=None)) for r in results]),
        ("watchers with every event, in order", [f"{r.watchers_complete} / {r.config.watchers}" for r in results]),
        ("events received / stored", [f"{r.events_received} / {r.events_expected}" for r in results]),
        ("event lag p50", [_ms(r.lag_p50_s) for r in results]),
        ("event lag p99 (target < 1 s)", [_ms(r.lag_p99_s) for r in results]),
        ("event lag max", [_ms(max(r.lag_s, default=None)) for r in results]),
        ("lag p99 of events created after the stream opened", [_ms(r.live_lag_p99_s) for r in results]),
        ("errors", [str(len(r.errors)) for r in results]),
        ("stream reconnects (Last-Event-ID)", [str(len(r.reconnects)) for r in results]),
        ("jobs by state", [", ".join(f"{k} {v}" for k, v in sorted(r.jobs_by_state.items())) for r in results]),
        ("first submission → last job finished", [f"{r.drain_s:.1f} s" for r in results]),
        ("CPU s: API / workers / load client", [
            f"{r.cpu_s.get('api', 0):.1f} / {sum(v for k, v in r.cpu_s.items() if k.startswith('worker')):.1f}"
            f" / {r.cpu_s.get('client', 0):.1f}" for r in results]),
        ("API CPU s per process: most / least", [
            f"{max(r.api_cpu_by_process_s):.2f} / {min(r.api_cpu_by_process_s):.2f}"
            if r.api_cpu_by_process_s else "–" for r in results]),
        *[(f"server timing p50 / p99: {phase}", [_phase_ms(r, phase) for r in results]) for phase in _PHASES],
        ("transactions storing the submissions (largest)", [
            f"{len(r.submissions_per_transaction)} ({r.submissions_per_transaction[0]})"
            if r.submissions_per_transaction else "–" for r in results]),
        ("load average before / after (1 min)", [
            f"{r.load_average_before[0]:.2f} / {r.load_average[0]:.2f}" for r in results]),
    ]
    lines = [
        "| | " + " | ".join(r.setup for r in results) + " |",
        "|" + " --- |" * (len(results) + 1),
        *[f"| {name} | " + " | ".join(values) + " |" for name, values in rows],
        "",
    ]
    for r in results:
        verdict = ", ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in r.passed.items())
        lines.append(f"- **{r.setup}**: {verdict}")
        lines += [f"  - error: {e}" for e in r.errors[:10]]
        lines += [f"  - reconnect: {e}" for e in r.reconnects[:10]]
    return lines


def render_markdown(groups: Sequence[Sequence[SetupResult]], *, note: str) -> str:
    """The results of each scenario, its setups side by side."""
    config = groups[0][0].config
    lines = [
        "# Load run: last results",
        "",
        f"Written by `python -m benchmarks.load_service` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC "
        f"({platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}). "
        "benchmarks/README.md says how to rerun, how to read the figures, and what changed between runs.",
        "",
        f"Every scenario: {config.watchers} SSE watchers (one per {config.jobs // config.watchers}th job, "
        f"from its 202 to its end), {config.workers} worker processes, job body `{config.body}`.",
        "",
    ]
    for results in groups:
        lines += [f"## {_scenario(results[0].config)}", "", *_table(results), ""]
    if note:
        lines += [note, ""]
    return "\n".join(lines)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)  # microseconds: the clocks read here are no finer
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def dump_results(raw: Sequence[dict[str, Any]]) -> str:
    """The raw results as JSON, one setup's result per line (samples included)."""
    return "[\n" + ",\n".join(json.dumps(_rounded(r)) for r in raw) + "\n]\n"


#: ``--matrix``: the issue's burst and a steady arrival, each cold and warm.
MATRIX: tuple[tuple[float | None, int], ...] = ((None, 0), (None, 20), (50.0, 0), (50.0, 20))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load_service", description=__doc__.split("\n")[0])
    parser.add_argument("--setup", choices=[*SETUPS, "both"], default="both")
    parser.add_argument("--jobs", type=int, default=LoadConfig.jobs)
    parser.add_argument("--watchers", type=int, default=LoadConfig.watchers)
    parser.add_argument("--workers", type=int, default=LoadConfig.workers)
    parser.add_argument("--keys", type=int, default=LoadConfig.keys, help="API keys to spread submissions over")
    parser.add_argument("--submitters", type=int, default=LoadConfig.submitters,
                        help="client processes sending the submissions")
    parser.add_argument("--api-workers", type=int, default=LoadConfig.api_workers,
                        help="API processes (kernelloop serve --workers)")
    parser.add_argument("--api-setting", action="append", default=[], metavar="FIELD=VALUE",
                        help="a config.Settings field for the services (repeatable), e.g. api_submit_batch_max=10")
    parser.add_argument("--body", choices=["double", "evaluation"], default=LoadConfig.body)
    parser.add_argument("--rate", type=float, default=None, help="submissions per second (default: all at once)")
    parser.add_argument("--deadline-s", type=float, default=LoadConfig.deadline_s)
    parser.add_argument("--warmup", type=int, default=LoadConfig.warmup,
                        help="submissions sent one by one (and run) before the measured phase")
    parser.add_argument("--matrix", action="store_true",
                        help="run all at once and at 50/s, each cold and after 20 warm-up submissions")
    parser.add_argument("--postgres-url", default=os.environ.get("KERNELLOOP_TEST_POSTGRES_URL") or DEFAULT_PG_URL)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--label", default="last", help="results go to results/load_service[.LABEL].{md,json}")
    parser.add_argument("--note", default="", help="a line added to the markdown (what else ran)")
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy the services' logs here")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    scenarios = MATRIX if args.matrix else ((args.rate, args.warmup),)
    settings = []
    for item in args.api_setting:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--api-setting {item!r}: write FIELD=VALUE")
        settings.append((name.strip(), value.strip()))
    configs = [LoadConfig(jobs=args.jobs, watchers=args.watchers, workers=args.workers, keys=args.keys,
                          body=args.body, rate=rate, deadline_s=args.deadline_s, warmup=warmup,
                          api_workers=args.api_workers, submitters=args.submitters, settings=tuple(settings))
               for rate, warmup in scenarios]
    for url in (args.postgres_url, args.redis_url):
        host = make_url(url).host if url.startswith("postgres") else url.split("//", 1)[1].split(":", 1)[0]
        if host not in (HOST, "localhost"):
            parser.error(f"{url}: this script only talks to {HOST}")
    setups = SETUPS if args.setup == "both" else (args.setup,)
    groups: list[list[SetupResult]] = []
    for config in configs:
        groups.append([])
        for setup in setups:
            print(f"{setup}, {_scenario(config)}: starting", file=sys.stderr, flush=True)
            result = run_setup(setup, config, postgres_url=args.postgres_url, redis_url=args.redis_url,
                               keep_logs=args.keep_logs)
            summary = {k: v for k, v in result.to_dict().items() if not isinstance(v, list)}
            print(f"{setup}: {json.dumps(summary)}", file=sys.stderr, flush=True)
            groups[-1].append(result)
    stem = "load_service" if args.label == "last" else f"load_service.{args.label}"
    _RESULTS.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(groups, note=args.note)
    (_RESULTS / f"{stem}.md").write_text(markdown)
    (_RESULTS / f"{stem}.json").write_text(dump_results([r.to_dict() for results in groups for r in results]))
    print(markdown)
    return 0 if all(all(r.passed.values()) for results in groups for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
