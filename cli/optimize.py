"""``kernelloop optimize``: one agent job on the embedded default, with live progress.

The job goes through the same store and runner as a service job (SQLite in the data directory,
no Redis): it is created with the budgets and model the API would give it (`api.submissions.
resolve_budgets`, `api.services.resolve_profile`: the job stores what it runs under), claimed by
this process and run by `worker.runner.run_claimed_job` in a thread, while the main thread feeds
the job's events, as they are stored, to the live view ``watch`` uses (`cli.client.view.JobView`)
or, with ``--json``, prints them as ``watch --json`` does.

Ctrl-C or SIGTERM cancels the job, as ``kernelloop cancel`` would: the cancel is stored (so a
``kernelloop up`` sharing the data directory never re-queues it), the evaluation in flight is cut
short and recorded as ``cancelled``, the job ends ``cancelled`` and the command exits 3. A second
Ctrl-C (or a worker thread still busy after `CANCEL_GRACE_S`) finishes the job as cancelled at once.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.live import Live
from rich.markup import escape

from cli.client.output import JOB_EXIT_CODES, CliExit, out, print_json
from cli.client.output import err as client_err
from cli.client.view import JobView
from cli.common import LLM_HELP, split_llm
from cli.processes import StopSignals
from problems import ProblemFormatError, UnknownProblemError, load_problem
from vocabulary.evaluation import Target
from vocabulary.wire import JsonObject

if TYPE_CHECKING:
    from config import Settings

# A terminal wraps long lines at its width; a pipe or a file gets them whole (`cli.client.output`).
console, err = out, client_err
#: How often the progress view reads new events, and re-reads the job (tokens, cost, state).
_POLL_S = 0.3
_JOB_REFRESH_S = 1.0
#: Redraws per second of the live view on a terminal (the running stage's clock moves on its own).
_LIVE_REFRESH_PER_S = 4
#: After Ctrl-C, how long the job's thread may take to stop (its lease keeper notices the cancel
#: within a second, kills the sandboxes, and the agent stops at its next safe point) before the job
#: is finished as cancelled without it.
CANCEL_GRACE_S = 20.0
#: The worker id of an ``optimize`` process: its host and pid say whether it still runs.
_WORKER_ID = "optimize-{host}-{pid}"
#: The reason a cancelled optimize job gives.
CANCEL_REASON = "cancelled by Ctrl-C (or SIGTERM) on `kernelloop optimize`"


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


def dashboard_hint(settings: Settings, job_id: int) -> str:
    """Where to see an optimize job in a browser: `kernelloop up` on the same data directory
    serves it to the local key that owns it."""
    return (f"dashboard: run `kernelloop up`, open http://{settings.api_host}:{settings.api_port}/dashboard/jobs/"
            f"{job_id} and sign in with your local key (`cat {settings.local_key_path}`)")


def optimize(
    problem: Annotated[str, typer.Argument(help="a bundled problem id or a problem file")],
    llm: Annotated[str, typer.Option(help=LLM_HELP)] = "scripted",
    target: Annotated[Target | None, typer.Option("--target", "-t", help="cuda or cpu (default: cuda if present)")]
    = None,
    trajectories: Annotated[int, typer.Option(min=1, max=16, help="independent chats; best of all")] = 1,
    turns: Annotated[int | None, typer.Option(min=1, help="assistant turns per trajectory (default: the "
                                              "service's, KERNELLOOP_DEFAULT_TURNS)")] = None,
    tool_calls: Annotated[int | None, typer.Option(min=1, help="tool calls per trajectory")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="token budget of the job")] = None,
    max_cost: Annotated[float | None, typer.Option(min=0, help="cost budget of the job, USD")] = None,
    wall_clock: Annotated[float | None, typer.Option(min=1, help="wall-clock budget, seconds")] = None,
    target_speedup: Annotated[float | None, typer.Option(help="stop once a verified attempt is this fast")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="the embedded database and caches")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="the new job as JSON on stdout's first line, then `watch --json`'s lines")] = False,
) -> None:
    """Let an LLM optimise a problem on this machine (embedded store, no Redis), with live progress.

    Exits by the job's final state, as `submit` does: 0 succeeded, 1 failed, 3 cancelled (Ctrl-C)."""
    from pydantic import ValidationError

    from api.errors import ApiError
    from api.schemas import BudgetsInput
    from api.services import check_script, resolve_profile
    from api.submissions import resolve_budgets
    from cli.common import default_target
    from cli.keys import ensure_local_key
    from config import load_settings
    from store import (
        JobKind,
        claim_job,
        create_job,
        get_or_create_problem,
        key_cost_left,
        make_engine,
        make_session_factory,
        session_scope,
    )
    from store import Target as StoreTarget
    from store.migrate import upgrade

    out = err if as_json else console
    try:
        spec = load_problem(problem)
    except (UnknownProblemError, ProblemFormatError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(CliExit.USAGE) from None
    settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    target = target or default_target()
    try:
        profile, model = resolve_profile(*split_llm(llm), settings)
        check_script(profile, settings, spec.id if spec.level is not None else None, StoreTarget(target.value))
        requested = BudgetsInput(turns=turns, tool_calls=tool_calls, max_tokens=max_tokens, max_cost_usd=max_cost,
                                 wall_clock_s=wall_clock, target_speedup=target_speedup)
    except ApiError as exc:
        err.print(f"[red]error:[/red] {escape(exc.detail.replace('llm_profile ', '--llm ', 1))}", highlight=False)
        raise typer.Exit(CliExit.USAGE) from None
    except ValidationError as exc:
        err.print(f"[red]error:[/red] {escape('; '.join(e['msg'] for e in exc.errors()))}", highlight=False)
        raise typer.Exit(CliExit.USAGE) from None
    missing_key = settings.llm_profiles[profile].missing_key_message(profile, "in this shell")
    if missing_key is not None:  # every request would be a 401, after retries
        err.print(f"[red]error:[/red] {escape(missing_key)}", highlight=False)
        raise typer.Exit(CliExit.USAGE)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    upgrade(url)
    # Owned by the local key, so the job shows on the dashboard of `kernelloop up` for this user.
    local_key = ensure_local_key(settings)
    factory = make_session_factory(make_engine(url))
    for orphan in fail_orphaned_jobs(factory):
        err.print(f"[yellow]job {orphan} was left running by an optimize process that died: marked failed[/]")
    worker_id = _WORKER_ID.format(host=socket.gethostname(), pid=os.getpid())
    with StopSignals().installed() as signals:
        with session_scope(factory) as session:
            # The budgets the API would give it, bounded by what the local key may still spend.
            budgets = resolve_budgets(requested, settings.default_budgets(),
                                      cost_left=key_cost_left(session=session, api_key_id=local_key.key_id))
            declarations = {k: v for k, v in spec.to_dict().items() if k != "source"}
            stored = get_or_create_problem(session=session, source=spec.source, declarations=declarations,
                                           bundled_id=spec.id if spec.level is not None else None)
            job = create_job(session=session, problem_id=stored.id, target=StoreTarget(target.value),
                             kind=JobKind.AGENT, llm_profile=profile, llm_model=model,
                             budgets=budgets.to_dict(), trajectories_count=trajectories,
                             owner_id=local_key.key_id)
            job_id = job.id
            # Claimed in the transaction that creates it: a `kernelloop up` sharing the data
            # directory polls for queued jobs and, given the moment between two, took this one.
            if claim_job(session=session, job_id=job_id, worker_id=worker_id,
                         lease_seconds=settings.lease_seconds) is None:
                raise RuntimeError(f"job {job_id} could not be claimed in the transaction that created it")
        run = _Run(job_id=job_id, worker_id=worker_id, settings=settings, factory=factory)
        if as_json:
            print_json(run.read_job())
        out.print(f"job {job_id}: {spec.id} on {target.value} with {llm} "
                  f"({trajectories} trajectory{'s' if trajectories > 1 else ''}); database {url}", highlight=False)
        out.print(dashboard_hint(settings, job_id), highlight=False)
        state = run.follow(signals, as_json=as_json)
    if run.failure:
        raise typer.Exit(CliExit.USAGE)  # our bug, not the job's outcome
    raise typer.Exit(JOB_EXIT_CODES.get(state, CliExit.FAILED))


class _Run:
    """The job's thread and what the user sees of it, until it ends."""

    def __init__(self, *, job_id: int, worker_id: str, settings: Settings, factory: Any) -> None:
        self.job_id = job_id
        self.worker_id = worker_id
        self.settings = settings
        self.factory = factory
        self.failure: list[BaseException] = []
        self.thread = threading.Thread(target=self._work, name=f"job-{job_id}", daemon=True)

    def _work(self) -> None:
        from worker.runner import run_claimed_job

        try:
            run_claimed_job(self.job_id, settings=self.settings, session_factory=self.factory,
                            worker_id=self.worker_id)
        except BaseException as exc:  # noqa: BLE001 - shown to the user after the progress view ends
            self.failure.append(exc)

    def read_job(self) -> JsonObject:
        from api.schemas import JobPublic
        from store import get_job, session_scope

        with session_scope(self.factory) as session:
            return JobPublic.from_job(get_job(session=session, job_id=self.job_id)).model_dump(mode="json")

    def _events(self, after: int) -> list[tuple[int, str, JsonObject]]:
        from store import events_after, session_scope

        with session_scope(self.factory) as session:
            return [(e.id, str(e.type), dict(e.payload or {}))
                    for e in events_after(session=session, job_id=self.job_id, after_id=after, limit=200)]

    def _request_cancel(self) -> None:
        from store import cancel_job, session_scope

        with session_scope(self.factory) as session:
            cancel_job(session=session, job_id=self.job_id, reason=CANCEL_REASON)

    def _finish_cancelled(self) -> None:
        """The job's thread did not stop in time (or Ctrl-C came twice): its sandboxes are killed and the
        job finished as cancelled here; the thread, a daemon, stores nothing more (its lease is gone)."""
        from harness import cancel_all
        from store import IllegalTransition, JobState, LeaseLost, finish_job, session_scope

        cancel_all()
        with contextlib.suppress(LeaseLost, IllegalTransition), session_scope(self.factory) as session:
            finish_job(session=session, job_id=self.job_id, worker_id=self.worker_id, state=JobState.CANCELLED,
                       error=CANCEL_REASON)

    def follow(self, signals: StopSignals, *, as_json: bool) -> str:
        """Run the job and show it until it ends; returns its final state."""
        out = err if as_json else console
        view = JobView(job=self.read_job())
        live = (Live(view, console=console, refresh_per_second=_LIVE_REFRESH_PER_S)
                if console.is_terminal and not as_json else None)
        self.thread.start()
        last, refreshed, cancel_at = 0, 0.0, None
        if live is not None:
            live.start()
        try:
            while True:
                if signals.count and cancel_at is None:
                    cancel_at = time.monotonic()
                    view.note = "cancelling: stopping the evaluation in flight"
                    out.print(f"[yellow]cancelling job {self.job_id}[/] (Ctrl-C again to stop at once)",
                              highlight=False)
                    self._request_cancel()
                if cancel_at is not None and self.thread.is_alive() and (
                        signals.count > 1 or time.monotonic() - cancel_at > CANCEL_GRACE_S):
                    self._finish_cancelled()
                    break
                alive = self.thread.is_alive()
                events = self._events(last)
                for event_id, event_type, payload in events:
                    last = event_id
                    line = view.apply(event_type, payload)
                    if as_json:
                        print_json({"id": event_id, "type": event_type, "data": payload})
                    elif line and live is None:
                        console.print(line, highlight=False)
                if events or time.monotonic() - refreshed > _JOB_REFRESH_S or not alive:
                    view.job = self.read_job()
                    refreshed = time.monotonic()
                if live is not None:
                    live.refresh()
                if not alive and not events:
                    break
                # Woken at once by a Ctrl-C (the first, or the second while cancelling).
                signals.wait(_POLL_S, beyond=0 if cancel_at is None else 1)
        finally:
            if live is not None:
                live.stop()
        view.job = self.read_job()
        if as_json:
            print_json({"id": None, "type": "job", "data": view.job})
        elif live is None:
            view.show(console)
        if self.failure:
            out.print(f"[red]the job crashed:[/red] {escape(repr(self.failure[0]))}", highlight=False)
        dashboard = f"http://{self.settings.api_host}:{self.settings.api_port}/dashboard/jobs/{self.job_id}"
        for line in view.summary(replay_hint=f"kernelloop replay {self.job_id}", dashboard_url=dashboard):
            out.print(line, highlight=False)
        if view.job.get("state") == "cancelled":
            out.print(f"job {self.job_id} is cancelled: nothing more runs or is charged for it, and no worker "
                      "will take it up again; the attempts it stored stay", highlight=False)
        out.print(f"(the dashboard is served by `kernelloop up`; sign in with your local key: "
                  f"`cat {self.settings.local_key_path}`)", highlight=False)
        return str(view.job.get("state"))
