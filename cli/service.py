"""The service's commands: ``kernelloop up`` (embedded), ``worker`` and ``serve`` (distributed).

Plain Typer command functions, registered by `cli.main`::

    app.command("up")(service.up)
    app.command("worker")(service.worker)
    app.command("serve")(service.serve)

(`service_commands` is the same three as a Typer app: ``python -m cli.service worker …``, which
is what the container images run.)

``up`` runs everything on one machine: migrations, the API (uvicorn, in this process) and one
embedded worker process per GPU (``CUDA_VISIBLE_DEVICES=i``; one CPU worker on a machine
without one), the database being the queue. Ctrl-C stops the API and every worker.
``worker`` is the production worker: one Celery process consuming one queue (one per GPU);
``serve`` the production API alone (its dispatcher sends Celery messages through Redis).
The API, the worker and uvicorn are imported inside the commands, so ``kernelloop eval`` and
friends never load them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from config import Settings, load_settings

__all__ = ["WorkerPlan", "detect_gpus", "plan_workers", "serve", "service_commands", "up", "worker"]

err = Console(stderr=True)
log = logging.getLogger("kernelloop.up")

#: How long stopping workers may take before they are killed (a job's lease then expires).
STOP_GRACE_S = 10.0
#: Pause before restarting a worker process that died on its own.
RESTART_DELAY_S = 2.0
#: Exit statuses of a worker that was asked to stop (exit 0, SIGINT, SIGTERM, as signal or code).
_CLEAN_EXITS = (0, -signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM)


@dataclass(frozen=True)
class WorkerPlan:
    """One embedded worker process: its target and the GPU it sees (``None``: no restriction)."""

    target: str
    cuda_visible_devices: str | None = None

    @property
    def label(self) -> str:
        return self.target if self.cuda_visible_devices is None else f"{self.target}:{self.cuda_visible_devices}"


def detect_gpus(environ: dict[str, str] | None = None, proc_dir: Path = Path("/proc/driver/nvidia/gpus")) -> list[str]:
    """The GPUs this machine offers, as ``CUDA_VISIBLE_DEVICES`` values (without importing torch).

    ``CUDA_VISIBLE_DEVICES``, when set, is the answer; otherwise one index per GPU the NVIDIA
    driver lists (``/proc/driver/nvidia/gpus``, else ``nvidia-smi -L``).
    """
    environ = dict(os.environ) if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    count = 0
    if proc_dir.is_dir():
        count = sum(1 for entry in proc_dir.iterdir() if entry.is_dir())
    elif shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
            count = sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(count)]


def plan_workers(*, gpus: Sequence[str], workers: int | None = None, target: str | None = None) -> list[WorkerPlan]:
    """Which embedded workers ``up`` starts: one per GPU (``cuda``), else ``workers`` CPU ones.

    Args:
        gpus: the GPUs found (`detect_gpus`).
        workers: how many worker processes; on ``cuda`` they take the GPUs round-robin
            (more than one per GPU share it: the timing lock keeps their timings apart).
        target: ``cuda`` or ``cpu``; default: ``cuda`` when there is a GPU.
    """
    target = target or ("cuda" if gpus else "cpu")
    if target == "cuda":
        if not gpus:
            raise ValueError("--target cuda, but no GPU was found (nvidia driver, CUDA_VISIBLE_DEVICES)")
        count = workers or len(gpus)
        return [WorkerPlan("cuda", gpus[i % len(gpus)]) for i in range(count)]
    if target != "cpu":
        raise ValueError(f"unknown target {target!r}: use cuda or cpu")
    return [WorkerPlan("cpu") for _ in range(workers or 1)]


class _Workers:
    """The embedded worker processes of ``up``: started, restarted when they die, stopped."""

    def __init__(self, plans: Sequence[WorkerPlan]) -> None:
        self._plans = list(plans)
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * len(self._plans)
        self._stopping = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="worker-monitor", daemon=True)

    def _spawn(self, plan: WorkerPlan) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        if plan.cuda_visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = plan.cuda_visible_devices
        argv = [sys.executable, "-m", "worker.embedded", "--target", plan.target, "--parent-pid", str(os.getpid())]
        return subprocess.Popen(argv, env=env)

    def start(self) -> None:
        for i, plan in enumerate(self._plans):
            self._processes[i] = self._spawn(plan)
            err.print(f"worker {plan.label} started (pid {self._processes[i].pid})")  # type: ignore[union-attr]
        self._monitor.start()

    def _watch(self) -> None:
        while not self._stopping.wait(1.0):
            for i, process in enumerate(self._processes):
                # A worker that stopped cleanly (Ctrl-C reaches it too) is not restarted; one that
                # crashed or was killed (OOM) is. A restarted worker dies with this thread, which
                # lives until `stop` (PR_SET_PDEATHSIG follows the thread that started it).
                if process is not None and process.poll() not in (None, *_CLEAN_EXITS) and not self._stopping.is_set():
                    plan = self._plans[i]
                    err.print(f"[yellow]worker {plan.label} exited with {process.returncode}; restarting[/]")
                    if self._stopping.wait(RESTART_DELAY_S):
                        return
                    self._processes[i] = self._spawn(plan)

    def stop(self) -> None:
        self._stopping.set()
        alive = [p for p in self._processes if p is not None and p.poll() is None]
        for process in alive:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in alive:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def up(
    host: Annotated[str | None, typer.Option(help="address the API listens on (default KERNELLOOP_API_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port of the API (default KERNELLOOP_API_PORT)")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", "-w", min=1, help="worker processes (default: one per GPU, or one CPU worker)")] = None,
    target: Annotated[str | None, typer.Option(
        help="cuda or cpu (default: cuda when a GPU is present)")] = None,
) -> None:
    """Run the whole service on this machine: migrations, the API and the workers (SQLite, no Redis)."""
    import uvicorn

    from api.app import create_app
    from store.migrate import upgrade

    settings = load_settings()
    if not settings.embedded:
        err.print("[yellow]KERNELLOOP_BROKER_URL is set, but `up` runs the embedded mode: the database is the "
                  "queue and the broker is not used (see docs/deploy.md for the distributed mode).[/]")
        settings = settings.model_copy(update={"broker_url": None})
    if host is not None or port is not None:
        settings = settings.model_copy(update={"api_host": host or settings.api_host,
                                               "api_port": port or settings.api_port})
    try:
        plans = plan_workers(gpus=detect_gpus(), workers=workers, target=target)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    # Jobs that name no target go where this machine's workers are.
    settings = settings.model_copy(update={"default_target": plans[0].target})
    _prepare_data_dir(settings)
    err.print(f"migrating {_display_url(settings)} …")
    upgrade(settings.resolved_database_url)
    pool = _Workers(plans)
    pool.start()
    try:
        err.print(f"API on http://{settings.api_host}:{settings.api_port} (docs at /docs); Ctrl-C stops everything")
        uvicorn.run(create_app(settings), host=settings.api_host, port=settings.api_port, log_level="info")
    finally:
        pool.stop()
        err.print("stopped")


def worker(
    queue: Annotated[str | None, typer.Option(
        "--queue", "-Q", help="the queue to consume: cpu or gpu-<type> (default: KERNELLOOP_WORKER_TARGET's)")] = None,
    loglevel: Annotated[str, typer.Option(help="Celery's log level")] = "INFO",
) -> None:
    """Run one production worker (Celery, Redis): one per GPU, with CUDA_VISIBLE_DEVICES set."""
    from worker.wiring import create_worker_app, target_for_queue

    settings = load_settings()
    if settings.embedded:
        err.print("[red]error:[/red] no KERNELLOOP_BROKER_URL: `kernelloop worker` is the distributed mode's "
                  "worker (Redis); on one machine run `kernelloop up` instead")
        raise typer.Exit(2)
    queue = queue or settings.queue_for(settings.worker_target)
    try:
        target = target_for_queue(queue)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    app = create_worker_app(settings, target=target)
    device = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_") if target.value == "cuda" else "cpu"
    app.worker_main(["worker", "--queues", queue, "--concurrency", "1", "--pool", "solo",
                     "--hostname", f"kernelloop-{queue}-{device}@%h", "--loglevel", loglevel])


def serve(
    host: Annotated[str | None, typer.Option(help="address to listen on (default KERNELLOOP_API_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default KERNELLOOP_API_PORT)")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", "-w", min=1,
        help="API processes sharing the port (uvicorn's workers); each has its own connections and "
        "event hub, and needs KERNELLOOP_API_DB_POOL_SIZE connections of the database")] = 1,
    access_log: Annotated[bool, typer.Option(help="log every request (uvicorn's access log)")] = True,
) -> None:
    """Run the API alone (the distributed mode; migrations and workers run separately)."""
    import uvicorn

    settings = load_settings()
    if settings.embedded:
        err.print("[yellow]no KERNELLOOP_BROKER_URL: new jobs wait for an embedded worker polling this "
                  "database (`kernelloop up` runs both)[/]")
    options = {"host": host or settings.api_host, "port": port or settings.api_port, "log_level": "info",
               "proxy_headers": True, "access_log": access_log}
    if workers == 1:
        from api.app import create_app

        uvicorn.run(create_app(settings), **options)
    else:
        # Each worker process builds its own app from the environment (an app cannot be pickled).
        uvicorn.run("api.app:create_app_from_environment", factory=True, workers=workers, **options)


service_commands = typer.Typer(help="Run the service: embedded (up) or distributed (serve, worker).",
                               no_args_is_help=True, add_completion=False)
service_commands.command("up")(up)
service_commands.command("worker")(worker)
service_commands.command("serve")(serve)


def _prepare_data_dir(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.resolved_cache_dir.mkdir(parents=True, exist_ok=True)


def _display_url(settings: Settings) -> str:
    from store.db import normalize_url

    return normalize_url(settings.resolved_database_url).render_as_string(hide_password=True)


if __name__ == "__main__":
    service_commands()
