"""``kernelloop model optimize``: a model's hot regions optimised on this machine, as one model run.

The model is profiled (in a sandbox), the regions are selected (by default the largest until
80 % of the model's time is covered; ``--regions``, ``--top``), and a model run is stored in the
embedded store (SQLite in the data directory, no Redis) with one agent job per region, the run's
budgets split by share. This process runs the jobs one after another through the same runner a
worker uses (`worker.runner.run_claimed_job`), showing each region's job live; the last job's end
verifies the whole patched model (`worker.modelruns`). The dashboard of ``kernelloop up`` shows the
run (``/dashboard/models/<id>``).
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
from rich.table import Table

from cli.common import LLM_HELP, default_target, machine_options
from cli.model import CacheOpt, GainsOpt, TargetOpt, load_model, profile_or_exit, render_profile, render_report
from display import fmt_pct, fmt_speedup
from vocabulary.regionplan import DEFAULT_COVERAGE, Region, select_regions, share_weights
from vocabulary.wire import JsonObject

__all__ = ["optimize_model"]

err = Console(stderr=True)
out = Console()
_POLL_S = 0.5
_WORKER_ID = "model-optimize-{host}-{pid}"


def _selection(profile: Any, regions: str | None, top: int | None, coverage: float) -> list[Region]:
    names = [n.strip() for n in regions.split(",") if n.strip()] if regions else None
    try:
        return select_regions(profile, names=names, top=top, coverage=coverage)
    except KeyError as exc:
        err.print(f"[red]error:[/red] {exc.args[0]}", highlight=False)
        raise typer.Exit(2) from None


def _table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title)
    for col in ("region", "share", "job", "state", "attempts", "best vs eager", "vs torch.compile", "now"):
        table.add_column(col)
    for row in rows:
        table.add_row(row["name"], fmt_pct(100 * row["share"]), str(row["job"]), row["state"], str(row["attempts"]),
                      fmt_speedup(row["eager"]), fmt_speedup(row["compile"]), row["now"])
    return table


def optimize_model(
    file: Annotated[Path, typer.Argument(help="the model file (Model, get_inputs, get_init_inputs)")],
    llm: Annotated[str, typer.Option(help=LLM_HELP)] = "scripted",
    target: TargetOpt = None,
    regions: Annotated[str | None, typer.Option(help="regions to optimise, comma-separated (default: the largest "
                                                     "until --coverage of the model's time)")] = None,
    top: Annotated[int | None, typer.Option(min=1, help="the TOP largest regions")] = None,
    coverage: Annotated[float, typer.Option(min=0.0, max=1.0, help="the default selection's share")] = DEFAULT_COVERAGE,
    trajectories: Annotated[int, typer.Option(min=1, max=16, help="independent chats per region")] = 1,
    turns: Annotated[int | None, typer.Option(help="assistant turns per trajectory (not split)")] = None,
    tool_calls: Annotated[int | None, typer.Option(help="tool calls of the whole run, split by share")] = None,
    compile_gains: GainsOpt = True,
    out_path: Annotated[Path | None, typer.Option("--out", help="also write the patched model here")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="the embedded database and caches")] = None,
    cache_dir: CacheOpt = None,
) -> None:
    """Optimise FILE's hot regions here (one job each, one model run), then verify the patched model."""
    from agent.providers.scripted import has_script, no_script_message
    from cli.keys import ensure_local_key
    from cli.model import write_patched
    from cli.optimize import split_llm
    from config import load_settings
    from harness.modelextract import region_problem
    from store import (
        ModelRunState,
        NewModelRegion,
        claim_job,
        create_model_run,
        get_model_run,
        make_engine,
        make_session_factory,
        region_jobs,
        session_scope,
        split_budgets,
    )
    from store import Target as StoreTarget
    from store.migrate import upgrade
    from vocabulary.modelreport import ApplyReport
    from worker.modelruns import best_kernels
    from worker.runner import run_claimed_job

    model = load_model(file)
    settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    profile_name, llm_model = split_llm(llm)
    if profile_name not in settings.llm_profiles:
        err.print(f"[red]error:[/red] unknown LLM profile {profile_name!r}; known: {', '.join(settings.llm_profiles)}")
        raise typer.Exit(2)
    target = target or default_target()
    options = machine_options(cache_dir)
    profile = profile_or_exit(model, target, options, compile_gains=compile_gains)
    chosen = _selection(profile, regions, top, coverage)
    problems = {r.name: region_problem(r, model.id) for r in chosen}
    if settings.llm_profiles[profile_name].provider == "scripted":
        missing = [p for p in problems.values() if not has_script(p.id, target.value)]
        if missing:
            err.print(f"[red]error:[/red] {no_script_message(missing[0].id, target.value)}", highlight=False)
            raise typer.Exit(2)
    render_profile(profile, out, {r.name for r in chosen})
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    upgrade(url)
    local_key = ensure_local_key(settings)
    factory = make_session_factory(make_engine(url))
    total: JsonObject = {
        "turns": turns or settings.default_turns,
        "tool_calls": tool_calls or settings.default_tool_calls * len(chosen),
        "max_tokens": settings.default_max_tokens * len(chosen),
        "wall_clock_s": settings.default_wall_clock_s * len(chosen),
    }
    budgets = split_budgets(total, share_weights({r.name: r.share for r in chosen}))
    new = [NewModelRegion(name=r.name, share=r.share, source=r.source, budgets=budgets[r.name],
                          declarations={k: v for k, v in problems[r.name].to_dict().items() if k != "source"})
           for r in chosen]
    with session_scope(factory) as session:
        run = create_model_run(session=session, name=file.name, model_source=model.source,
                               model_sha256=model.sha256, target=StoreTarget(target.value), profile=profile.to_dict(),
                               regions=new, owner_id=local_key.key_id, llm_profile=profile_name,
                               llm_model=llm_model, budgets=total, trajectories=trajectories)
        run_id = run.id
        job_ids = [(item.region.name, item.job.id) for item in region_jobs(session=session, run_id=run_id)
                   if item.job is not None]
    out.print(f"model run {run_id}: {len(job_ids)} regions of {file.name} on {target.value} with {llm} "
              f"({fmt_pct(100 * profile.coverage(r.name for r in chosen))} of the model's time); database {url}",
              highlight=False)
    worker_id = _WORKER_ID.format(host=socket.gethostname(), pid=os.getpid())
    failure: list[BaseException] = []

    def work() -> None:
        try:
            for _, job_id in job_ids:
                with session_scope(factory) as session:
                    claimed = claim_job(session=session, job_id=job_id, worker_id=worker_id,
                                        lease_seconds=settings.lease_seconds)
                if claimed is not None:  # else `kernelloop up` on the same data directory runs it, or it was cancelled
                    run_claimed_job(job_id, settings=settings, session_factory=factory, worker_id=worker_id)
        except BaseException as exc:  # noqa: BLE001 - shown after the live view
            failure.append(exc)

    thread = threading.Thread(target=work, name=f"model-run-{run_id}", daemon=True)
    thread.start()
    title = f"model run {run_id}: {file.name}"
    live = Live(console=out, refresh_per_second=4) if out.is_terminal else None
    if live is not None:
        live.start()
    last_states: dict[str, str] = {}
    told_applying = False
    try:
        while True:
            rows, state = _rows(factory, run_id)
            if state == ModelRunState.APPLYING.value and not told_applying:
                told_applying = True
                err.print("every region's job ended: verifying the whole patched model (compile, check on fresh "
                          "weights and inputs, time against eager and torch.compile)…", highlight=False)
            if live is not None:
                live.update(_table(rows, f"{title} ({state})"))
            else:
                for row in rows:
                    if last_states.get(row["name"]) != row["state"]:
                        last_states[row["name"]] = row["state"]
                        out.print(f"{row['name']}: job {row['job']} {row['state']}", highlight=False)
            if not thread.is_alive():
                break
            time.sleep(_POLL_S)
    finally:
        if live is not None:
            live.stop()
    rows, state = _rows(factory, run_id)
    out.print(_table(rows, f"{title} ({state})"))
    if failure:
        err.print(f"[red]the model run crashed:[/red] {failure[0]!r}", highlight=False)
        raise typer.Exit(2)
    with session_scope(factory) as session:
        finished = get_model_run(session=session, run_id=run_id)
        report_data, error, final = finished.report, finished.error, finished.state
    if report_data is not None:
        report = ApplyReport.from_dict(report_data)
        render_report(report, profile, out)
        if out_path is not None and report.included:
            write_patched(report, profile, best_kernels(factory, run_id), file, out_path)
            out.print(f"patched model: {out_path} (run it: python {out_path})", highlight=False)
    if error:
        out.print(f"[red]{error}[/]", highlight=False)
    out.print(f"dashboard: run `kernelloop up`, open http://{settings.api_host}:{settings.api_port}/dashboard/models/"
              f"{run_id} and sign in with your local key (`cat {settings.local_key_path}`)", highlight=False)
    raise typer.Exit(0 if final is ModelRunState.SUCCEEDED else 1)


def _rows(factory: Any, run_id: int) -> tuple[list[dict[str, Any]], str]:
    from store import events_after, get_model_run, region_jobs, session_scope

    rows = []
    with session_scope(factory) as session:
        state = get_model_run(session=session, run_id=run_id).state.value
        for item in region_jobs(session=session, run_id=run_id):
            job = item.job
            best = job.best_attempt if job is not None else None
            now = ""
            if job is not None and not job.state.is_terminal:
                events = events_after(session=session, job_id=job.id, after_id=max(0, job.last_event_id - 1), limit=1)
                if events:
                    payload = dict(events[-1].payload or {})
                    now = str(payload.get("phase") or payload.get("stage") or events[-1].type)
            rows.append({"name": item.region.name, "share": item.region.share, "job": job.id if job else "—",
                         "state": job.state.value if job else "deleted", "attempts": job.attempts_count if job else 0,
                         "eager": best.speedup_vs_eager if best else None,
                         "compile": best.speedup_vs_compile if best else None, "now": now})
    return rows, state

