"""``kernelloop optimize``: one agent job on the embedded default, with live progress.

The job goes through the same store and runner as a service job (SQLite in the data directory,
no Redis): it is created, claimed by this process and run by `worker.runner.run_job` in a thread
while the main thread prints the job's events as they are stored.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from harness import Target
from problems import ProblemFormatError, UnknownProblemError, load_problem

console = Console()
#: How often the progress view reads new events.
_POLL_S = 0.3


def _split_llm(llm: str) -> tuple[str, str | None]:
    """``replay`` or a profile name, optionally ``PROFILE:MODEL`` (``openai:gpt-4o``)."""
    profile, _, model = llm.partition(":")
    return profile, (model or None)


def _describe(event_type: str, payload: dict) -> str | None:
    if event_type == "attempt":
        speed = payload.get("speedup_vs_eager")
        figures = f", {payload.get('median_ms'):.4f} ms, {speed:.2f}x vs eager" if speed else ""
        best = " [bold green](best)[/]" if payload.get("best") else ""
        return (f"attempt {payload.get('n')}: {payload.get('tool')} -> {payload.get('status')} "
                f"at {payload.get('stage')}{figures}{best}")
    if event_type == "state":
        why = payload.get("reason") or payload.get("error")
        return f"job {payload.get('state')}" + (f" ({why})" if why else "")
    if event_type == "message":
        tools = ", ".join(payload.get("tools") or []) or None
        return f"  {payload.get('role')}: {tools or (payload.get('preview') or '')[:100]}"
    if event_type in ("trajectory", "progress"):
        details = {k: v for k, v in payload.items() if k not in ("phase",)}
        return f"{event_type} {payload.get('phase', '')} {details if details else ''}".rstrip()
    return None


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
    from cli.common import default_target
    from config import load_settings
    from store import (
        Attempt,
        JobKind,
        create_job,
        events_after,
        get_job,
        get_or_create_problem,
        make_engine,
        make_session_factory,
        session_scope,
    )
    from store import Target as StoreTarget
    from store.jobs import claim_job
    from store.migrate import upgrade
    from worker.runner import run_job

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
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    upgrade(url)
    factory = make_session_factory(make_engine(url))
    target = target or default_target()
    budgets = {k: v for k, v in {"turns": turns, "tool_calls": tool_calls}.items() if v is not None}
    with session_scope(factory) as session:
        declarations = {k: v for k, v in spec.to_dict().items() if k != "source"}
        stored = get_or_create_problem(session=session, source=spec.source, declarations=declarations,
                                       bundled_id=spec.id if spec.level is not None else None)
        job = create_job(session=session, problem_id=stored.id, target=StoreTarget(target.value),
                         kind=JobKind.AGENT, llm_profile=profile, llm_model=model, budgets=budgets,
                         trajectories_count=trajectories)
        job_id = job.id
    worker_id = f"optimize-{socket.gethostname()}-{os.getpid()}"
    with session_scope(factory) as session:
        claim_job(session=session, job_id=job_id, worker_id=worker_id, lease_seconds=settings.lease_seconds)
    console.print(f"job {job_id}: {spec.id} on {target.value} with {llm} "
                  f"({trajectories} trajectory{'s' if trajectories > 1 else ''}); database {url}")

    failure: list[BaseException] = []

    def work() -> None:
        try:
            run_job(job_id, settings=settings, session_factory=factory, worker_id=worker_id)
        except BaseException as exc:  # noqa: BLE001 - shown to the user after the progress view ends
            failure.append(exc)

    thread = threading.Thread(target=work, name=f"job-{job_id}", daemon=True)
    thread.start()
    last = 0
    while True:
        alive = thread.is_alive()
        with session_scope(factory) as session:
            for event in events_after(session=session, job_id=job_id, after_id=last, limit=200):
                last = event.id
                line = _describe(str(event.type), dict(event.payload or {}))
                if line:
                    console.print(line)
        if not alive:
            break
        time.sleep(_POLL_S)
    if failure:
        console.print(f"[red]the job crashed:[/red] {failure[0]!r}")
        raise typer.Exit(2)
    with session_scope(factory) as session:
        job = get_job(session=session, job_id=job_id)
        state, error = str(job.state), job.error
        best = session.get(Attempt, job.best_attempt_id) if job.best_attempt_id is not None else None
        figures = None if best is None else (best.seq, best.median_ms, best.speedup_vs_eager, best.speedup_vs_compile,
                                              best.pct_of_sol)
    if figures is None:
        console.print(f"[yellow]no verified kernel[/] (job {state}{': ' + error if error else ''})")
        raise typer.Exit(1)
    n, median_ms, vs_eager, vs_compile, pct = figures
    console.print(f"[bold green]job {state}[/]: best is attempt {n}: {median_ms:.4f} ms, "
                  f"{vs_eager:.2f}x vs eager" + (f", {vs_compile:.2f}x vs torch.compile" if vs_compile else "")
                  + (f", {pct:.1f}% of the roofline" if pct else "") + f" (job {job_id} in {url})")
