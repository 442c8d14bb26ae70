"""The service's commands: ``kernelloop up`` (embedded), ``worker`` and ``serve`` (distributed).

Plain Typer command functions, registered by `cli.main`::

    app.command("up")(service.up)
    app.command("worker")(service.worker)
    app.command("serve")(service.serve_api)

(`service_commands` is the same three as a Typer app: ``python -m cli.service worker …``, which
is what the container images run; it also has the processes ``serve --workers N`` and ``up``
start: ``api-process`` and ``embedded-worker``.)

``up`` runs everything on one machine: migrations, the API (uvicorn, in this process) and one
embedded worker process per GPU (``CUDA_VISIBLE_DEVICES=i``; one CPU worker on a machine
without one), the database being the queue. Ctrl-C stops the API and every worker. It checks
its port before anything else (a second ``up`` says so and suggests ``--port``), and says it is
up only once every worker said it started: a worker that cannot start is said once, with its
reason, and ``up`` exits 1 (`cli.processes.Children`). Its children run ``python -P`` so that a
``config/`` or ``problems/`` folder in the working directory never shadows our packages.
``worker`` is the production worker: one Celery process consuming one queue (one per GPU);
``serve`` the production API alone (its dispatcher sends Celery messages through Redis); with
``--workers N`` it supervises N API processes, each listening on the port with a socket of its
own (`cli.processes`).
The API, the worker and uvicorn are imported inside the commands, so ``kernelloop eval`` and
friends never load them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from cli.child import die_with_parent, report_ready, starting_up, watch_parent
from cli.common import HELP_STYLE
from cli.processes import (
    Children,
    ChildSpec,
    ChildStartFailed,
    check_port_free,
    python_module,
    reuse_port_socket,
    wait_for_stop_signal,
)
from cli.workerplan import WorkerPlan, detect_gpus, plan_workers, shared_metrics_dir

if TYPE_CHECKING:
    from cli.keys import LocalKey
    from config import Settings

__all__ = ["WorkerPlan", "detect_gpus", "plan_workers", "serve_api", "service_commands", "up", "worker"]

err = Console(stderr=True)
#: uvicorn's own log level (the app's loggers are configured by `uvicorn_log_config`).
_UVICORN_LOG_LEVEL = "info"


def _worker_children(plans: Sequence[WorkerPlan], on_fatal: Callable[[ChildStartFailed], None]) -> Children:
    """``up``'s embedded workers, each told our pid so that it dies with us."""
    specs = []
    for plan in plans:
        argv = python_module("cli.service", "embedded-worker", "--target", plan.target,
                             "--parent-pid", str(os.getpid()))
        env = {} if plan.cuda_visible_devices is None else {"CUDA_VISIBLE_DEVICES": plan.cuda_visible_devices}
        specs.append(ChildSpec(f"worker {plan.label}", argv, env))
    return Children(specs, on_fatal=on_fatal)


def _port_taken(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, in words with what to do; ``None`` if it is free."""
    try:
        check_port_free(host, port)
    except OSError as exc:
        return (f"cannot listen on {host}:{port}: {exc.strerror or exc} (another `kernelloop up`, or another "
                f"program, has it): stop it, or choose another port with --port {port + 1}")
    return None


def up(
    host: Annotated[str | None, typer.Option(help="address the API listens on (default KERNELLOOP_API_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port of the API (default KERNELLOOP_API_PORT)")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", "-w", min=1, help="worker processes (default: one per GPU, or one CPU worker)")] = None,
    target: Annotated[str | None, typer.Option(
        help="cuda or cpu (default: cuda when a GPU is present)")] = None,
    access_log: Annotated[bool, typer.Option(help="log every HTTP request (off: polling clients drown the log)")]
    = False,
) -> None:
    """Run the whole service on this machine: migrations, the API and the workers (SQLite, no Redis)."""
    with shared_metrics_dir():
        _up(host, port, workers, target, access_log)


def _up(host: str | None, port: int | None, workers: int | None, target: str | None, access_log: bool) -> None:
    import uvicorn

    from api.app import create_app
    from cli.keys import ensure_local_key
    from config import load_settings
    from config.logs import uvicorn_log_config
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
    # Before anything is migrated or started: a second `up` says so and leaves the first alone.
    taken = _port_taken(settings.api_host, settings.api_port)
    if taken:
        err.print(f"[red]error:[/red] {taken}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    _prepare_data_dir(settings)
    err.print(f"migrating {_display_url(settings)} …")
    upgrade(settings.resolved_database_url)
    local_key = ensure_local_key(settings)
    config = uvicorn.Config(create_app(settings), host=settings.api_host, port=settings.api_port,
                            log_config=uvicorn_log_config(access_log=access_log), access_log=access_log)
    server = uvicorn.Server(config)

    def worker_lost(_failure: ChildStartFailed) -> None:
        server.should_exit = True  # a service without its worker would queue jobs forever

    pool = _worker_children(plans, on_fatal=worker_lost)
    try:
        pool.start()
    except ChildStartFailed as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        err.print("kernelloop is not up: fix the above and run `kernelloop up` again")
        raise typer.Exit(1) from None
    try:
        err.print(_banner(settings, plans, local_key, access_log=access_log), highlight=False, soft_wrap=True)
        server.run()
    finally:
        pool.stop()
        err.print("stopped")
    if pool.fatal is not None:
        raise typer.Exit(1)


def worker(
    queue: Annotated[str | None, typer.Option(
        "--queue", "-Q", help="the queue to consume: cpu or gpu-<type> (default: KERNELLOOP_WORKER_TARGET's)")] = None,
    loglevel: Annotated[str, typer.Option(help="Celery's log level")] = "INFO",
) -> None:
    """Run one production worker (Celery, Redis): one per GPU, with CUDA_VISIBLE_DEVICES set."""
    from config import load_settings
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


def serve_api(
    host: Annotated[str | None, typer.Option(help="address to listen on (default KERNELLOOP_API_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default KERNELLOOP_API_PORT)")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", "-w", min=1,
        help="API processes, each with its own socket on the port (the kernel spreads connections "
        "over them; Linux); each has its own connections and event hub, and needs "
        "KERNELLOOP_API_DB_POOL_SIZE connections of the database")] = 1,
    access_log: Annotated[bool, typer.Option(help="log every request (uvicorn's access log)")] = True,
) -> None:
    """Run the API alone (the distributed mode; migrations and workers run separately)."""
    from config import load_settings
    from config.logs import uvicorn_log_config

    settings = load_settings()
    if settings.embedded:
        err.print("[yellow]no KERNELLOOP_BROKER_URL: new jobs wait for an embedded worker polling this "
                  "database (`kernelloop up` runs both)[/]")
    host, port = host or settings.api_host, port or settings.api_port
    if workers == 1:
        import uvicorn

        from api.app import create_app

        uvicorn.run(create_app(settings), host=host, port=port, access_log=access_log,
                    log_config=uvicorn_log_config(access_log=access_log), log_level=_UVICORN_LOG_LEVEL,
                    proxy_headers=True)
        return
    taken = _port_taken(host, port)
    if taken:
        err.print(f"[red]error:[/red] {taken}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    argv = python_module("cli.service", "api-process", "--host", host, "--port", str(port),
                         "--parent-pid", str(os.getpid()), "--access-log" if access_log else "--no-access-log")
    lost = threading.Event()
    with shared_metrics_dir() as metrics_dir:
        processes = Children([ChildSpec(f"API process {i + 1}/{workers}", argv) for i in range(workers)],
                             on_fatal=lambda _failure: lost.set())
        try:
            processes.start()
        except ChildStartFailed as exc:
            err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        try:
            err.print(f"API on http://{host}:{port} ({workers} processes; metrics of all in {metrics_dir}); "
                      "Ctrl-C stops them")
            wait_for_stop_signal(lost)
        finally:
            processes.stop()
    if processes.fatal is not None:
        raise typer.Exit(1)


def api_process(
    host: Annotated[str, typer.Option()],
    port: Annotated[int, typer.Option()],
    parent_pid: Annotated[int, typer.Option()],
    access_log: Annotated[bool, typer.Option()] = True,
) -> None:
    """One of `serve --workers N`'s API processes (started by it, not by hand)."""
    import uvicorn

    from api.app import create_app
    from config import load_settings
    from config.logs import uvicorn_log_config

    die_with_parent(parent_pid)
    with starting_up():
        # Settings from the environment, as the supervisor's: an app cannot be handed to another process.
        app = create_app(load_settings())
        config = uvicorn.Config(app, host=host, port=port, access_log=access_log,
                                log_config=uvicorn_log_config(access_log=access_log), log_level=_UVICORN_LOG_LEVEL,
                                proxy_headers=True)
        sock = reuse_port_socket(host, port)
        report_ready()
    uvicorn.Server(config).run(sockets=[sock])


def embedded_worker(
    target: Annotated[str, typer.Option()],
    parent_pid: Annotated[int, typer.Option()],
) -> None:
    """One of `up`'s embedded workers (started by it, not by hand)."""
    # It must not outlive `up` by more than a few seconds however `up` dies (kill -9 included):
    # the death signal, and a watch on the parent in case the signal cannot be acted on.
    die_with_parent(parent_pid)
    with starting_up():  # a worker that cannot start says why to `up`, once, and exits 1
        from worker.embedded import run_embedded_worker as worker_main
        from worker.embedded import stop_now

        watch_parent(parent_pid, lambda: stop_now(1))
        code = worker_main(["--target", target], on_ready=report_ready)
    raise typer.Exit(code)


service_commands = typer.Typer(help="Run the service: embedded (up) or distributed (serve, worker).",
                               no_args_is_help=True, **HELP_STYLE)
service_commands.command("up")(up)
service_commands.command("worker")(worker)
service_commands.command("serve")(serve_api)
service_commands.command("api-process", hidden=True)(api_process)
service_commands.command("embedded-worker", hidden=True)(embedded_worker)


def _prepare_data_dir(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    settings.resolved_cache_dir.mkdir(parents=True, exist_ok=True)


def _banner(settings: Settings, plans: Sequence[WorkerPlan], local_key: LocalKey, *, access_log: bool) -> str:
    """What ``up`` tells its user: where the dashboard is, how to sign in, how to stop it."""
    host = "127.0.0.1" if settings.api_host in ("0.0.0.0", "::") else settings.api_host
    url = f"http://{host}:{settings.api_port}"
    workers = ", ".join(p.label for p in plans)
    return "\n".join([
        f"[bold]kernelloop is up[/] at {url} · workers: {workers} · cache: {settings.resolved_cache_dir}",
        f"  dashboard  {url}/dashboard  — sign in with your local key: cat {local_key.path}",
        f"  API docs   {url}/docs",
        "  your key   the CLI on this machine sends it by itself (`kernelloop submit level1/softmax`, "
        "`kernelloop jobs`); more keys: `kernelloop keys create --name NAME`",
        "  Ctrl-C stops the API and the workers" + ("" if access_log else "; --access-log logs every request"),
    ])


def _display_url(settings: Settings) -> str:
    from store.db import normalize_url

    return normalize_url(settings.resolved_database_url).render_as_string(hide_password=True)


if __name__ == "__main__":
    service_commands()
