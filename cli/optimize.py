"""``kernelloop optimize``: one agent job on the embedded default, with live progress.

The job goes through the same store and runner as a service job (SQLite in the data directory,
no Redis): it is created, claimed by this process and run by `worker.runner.run_claimed_job` in a thread
while the main thread feeds the job's events, as they are stored, to the live view ``watch``
uses (`cli.client.view.JobView`): the attempts table, the referee's stage with its elapsed
time, the steps a cold cache pays for once, the budgets; then a summary in words.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape

from cli.client.view import JobView
from config import Settings
from harness import Target
from harness.wire import JsonObject
from problems import ProblemFormatError, UnknownProblemError, load_problem

console = Console()
#: How often the progress view reads new events, and re-reads the job (tokens, cost, state).
_POLL_S = 0.3
_JOB_REFRESH_S = 1.0
#: Redraws per second of the live view on a terminal (the running stage's clock moves on its own).
_LIVE_REFRESH_PER_S = 4
#: The worker id of an ``optimize`` process: its host and pid say whether it still runs.
_WORKER_ID = "optimize-{host}-{pid}"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fail_orphaned_jobs(factory: Any) -> list[int]:
    """Fail the jobs an ``optimize`` process on this host left ``running`` when it died (kill -9,
    a crash, a reboot): its thread was the job's only worker, so nothing else would ever finish
    them. The attempts they stored stay. Returns their ids."""
    from store import JobState, finish_job, list_jobs, session_scope

    prefix = _WORKER_ID.format(host=socket.gethostname(), pid="")
    failed = []
    with session_scope(factory) as session:
        running = list_jobs(session=session, state=JobState.RUNNING, limit=500).items
        orphans = [(job.id, job.worker_id) for job in running
                   if job.worker_id and job.worker_id.startswith(prefix) and job.worker_id[len(prefix):].isdigit()
                   and not _process_alive(int(job.worker_id[len(prefix):]))]
    for job_id, worker_id in orphans:
        with session_scope(factory) as session:
            finish_job(session=session, job_id=job_id, worker_id=worker_id, state=JobState.FAILED,
                       error=f"its `kernelloop optimize` process (pid {worker_id[len(prefix):]}) died before the "
                       "job ended; the attempts it stored stay")
        failed.append(job_id)
    return failed


def _split_llm(llm: str) -> tuple[str, str | None]:
    """``replay`` or a profile name, optionally ``PROFILE:MODEL`` (``openai:gpt-4o``)."""
    profile, _, model = llm.partition(":")
    return profile, (model or None)


def dashboard_hint(settings: Settings, job_id: int) -> str:
    """Where to see an optimize job in a browser: `kernelloop up` on the same data directory
    serves it to the local key that owns it."""
    return (f"dashboard: run `kernelloop up`, open http://{settings.api_host}:{settings.api_port}/dashboard/jobs/"
            f"{job_id} and sign in with your local key (`cat {settings.local_key_path}`)")


def optimize(
    problem: Annotated[str, typer.Argument(help="a bundled problem id or a problem file")],
    llm: Annotated[str, typer.Option(help="an LLM profile (replay, openai, …), optionally PROFILE:MODEL")] = "replay",
    target: Annotated[Target | None, typer.Option("--target", "-t", help="cuda or cpu (default: cuda if present)")]
    = None,
    trajectories: Annotated[int, typer.Option(min=1, max=16, help="independent chats; best of all")] = 1,
    turns: Annotated[int | None, typer.Option(help="assistant turns per trajectory (default 10)")] = None,
    tool_calls: Annotated[int | None, typer.Option(help="tool calls per trajectory (default 30)")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="the embedded database and caches")] = None,
) -> None:
    """Let an LLM optimise a problem on this machine (embedded store, no Redis), with live progress."""
    from agent.providers.replay import has_script, no_script_message
    from api.schemas import JobPublic
    from cli.common import default_target
    from cli.keys import ensure_local_key
    from config import load_settings
    from store import (
        JobKind,
        claim_job,
        create_job,
        events_after,
        get_job,
        get_or_create_problem,
        make_engine,
        make_session_factory,
        session_scope,
    )
    from store import Target as StoreTarget
    from store.migrate import upgrade
    from worker.runner import run_claimed_job

    try:
        spec = load_problem(problem)
    except (UnknownProblemError, ProblemFormatError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    profile, model = _split_llm(llm)
    if profile not in settings.llm_profiles:
        console.print(f"[red]error:[/red] unknown LLM profile {profile!r}; known: {', '.join(settings.llm_profiles)}")
        raise typer.Exit(2)
    target = target or default_target()
    if settings.llm_profiles[profile].provider == "replay" and not has_script(spec.id, target.value):
        console.print(f"[red]error:[/red] {no_script_message(spec.id, target.value)}", highlight=False)
        raise typer.Exit(2)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    upgrade(url)
    # Owned by the local key, so the job shows on the dashboard of `kernelloop up` for this user.
    local_key = ensure_local_key(settings)
    factory = make_session_factory(make_engine(url))
    for orphan in fail_orphaned_jobs(factory):
        console.print(f"[yellow]job {orphan} was left running by an optimize process that died: marked failed[/]")
    budgets: JsonObject = {k: v for k, v in {"turns": turns, "tool_calls": tool_calls}.items() if v is not None}
    with session_scope(factory) as session:
        declarations = {k: v for k, v in spec.to_dict().items() if k != "source"}
        stored = get_or_create_problem(session=session, source=spec.source, declarations=declarations,
                                       bundled_id=spec.id if spec.level is not None else None)
        job = create_job(session=session, problem_id=stored.id, target=StoreTarget(target.value),
                         kind=JobKind.AGENT, llm_profile=profile, llm_model=model, budgets=budgets,
                         trajectories_count=trajectories, owner_id=local_key.key_id)
        job_id = job.id
    worker_id = _WORKER_ID.format(host=socket.gethostname(), pid=os.getpid())
    with session_scope(factory) as session:
        claim_job(session=session, job_id=job_id, worker_id=worker_id, lease_seconds=settings.lease_seconds)
    console.print(f"job {job_id}: {spec.id} on {target.value} with {llm} "
                  f"({trajectories} trajectory{'s' if trajectories > 1 else ''}); database {url}")
    console.print(dashboard_hint(settings, job_id), highlight=False)

    failure: list[BaseException] = []

    def work() -> None:
        try:
            run_claimed_job(job_id, settings=settings, session_factory=factory, worker_id=worker_id)
        except BaseException as exc:  # noqa: BLE001 - shown to the user after the progress view ends
            failure.append(exc)

    thread = threading.Thread(target=work, name=f"job-{job_id}", daemon=True)
    thread.start()

    def read_job() -> dict:
        with session_scope(factory) as session:
            return JobPublic.from_job(get_job(session=session, job_id=job_id)).model_dump(mode="json")

    view = JobView(job=read_job(), budget_defaults={
        "turns": settings.default_turns, "tool_calls": settings.default_tool_calls,
        "max_tokens": settings.default_max_tokens, "max_cost_usd": settings.default_max_cost_usd,
        "wall_clock_s": settings.default_wall_clock_s})
    live = Live(view, console=console, refresh_per_second=_LIVE_REFRESH_PER_S) if console.is_terminal else None
    last, refreshed = 0, 0.0
    if live is not None:
        live.start()
    try:
        while True:
            alive = thread.is_alive()
            with session_scope(factory) as session:
                events = [(e.id, str(e.type), dict(e.payload or {}))
                          for e in events_after(session=session, job_id=job_id, after_id=last, limit=200)]
            for event_id, event_type, payload in events:
                last = event_id
                line = view.apply(event_type, payload)
                if line and live is None:
                    console.print(line, highlight=False)
            if events or time.monotonic() - refreshed > _JOB_REFRESH_S or not alive:
                view.job = read_job()
                refreshed = time.monotonic()
            if live is not None:
                live.refresh()
            if not alive and not events:
                break
            time.sleep(_POLL_S)
    finally:
        if live is not None:
            live.stop()
    if live is None:
        console.print(view.render())
    if failure:
        console.print(f"[red]the job crashed:[/red] {escape(repr(failure[0]))}", highlight=False)
        raise typer.Exit(2)
    dashboard = f"http://{settings.api_host}:{settings.api_port}/dashboard/jobs/{job_id}"
    for line in view.summary(replay_hint=f"kernelloop replay {job_id}", dashboard_url=dashboard):
        console.print(line, highlight=False)
    console.print(f"(the dashboard is served by `kernelloop up`; sign in with your local key: "
                  f"`cat {settings.local_key_path}`)", highlight=False)
    raise typer.Exit(0 if view.job.get("best") else 1)
