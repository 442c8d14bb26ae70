"""``kernelloop submit``: queue an agent job, print its id, then follow it like ``watch``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.client.http import ApiOpt, ApiRequestError, KeyOpt, api_failure, open_client
from cli.client.jobs import follow_json
from cli.client.output import JOB_EXIT_CODES, CliExit, err, job_llm_label, job_problem_label, out, print_json
from cli.client.watch import follow_job
from cli.common import LLM_HELP, split_llm
from problems import bundled_ids
from vocabulary.evaluation import Target
from vocabulary.wire import JsonObject, Reader


def _problem_fields(problem: str) -> dict[str, str]:
    """``problem_id`` for a bundled id, else ``problem_source`` read from the file."""
    if problem in bundled_ids():
        return {"problem_id": problem}
    path = Path(problem)
    if path.is_file():
        return {"problem_source": path.read_text()}
    if "/" in problem and not path.suffix:
        return {"problem_id": problem}  # the server may know ids this install does not; it says if not
    err.print(f"[red]error:[/red] {problem!r} is neither a bundled problem id (`kernelloop problems list`) nor a file")
    raise typer.Exit(CliExit.USAGE)


def submit(
    problem: Annotated[str, typer.Argument(help="a bundled problem id or a problem file")],
    api: ApiOpt = None,
    key: KeyOpt = None,
    target: Annotated[Target | None, typer.Option(
        "--target", "-t", help="cuda or cpu (default: the service's; `kernelloop up` uses its workers')")] = None,
    llm: Annotated[str | None, typer.Option("--llm", help=f"{LLM_HELP} on the server (default: the server's)")]
    = None,
    trajectories: Annotated[int | None, typer.Option(min=1, help="independent chats; the best wins")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="token budget of the job")] = None,
    max_cost: Annotated[float | None, typer.Option(min=0, help="cost budget of the job, USD")] = None,
    turns: Annotated[int | None, typer.Option(min=1, help="assistant turns per trajectory")] = None,
    wall_clock: Annotated[float | None, typer.Option(min=1, help="wall-clock budget, seconds")] = None,
    target_speedup: Annotated[float | None, typer.Option(help="stop once a verified attempt is this fast")] = None,
    follow: Annotated[bool, typer.Option("--follow/--no-follow", help="watch the job until it ends")] = True,
    as_json: Annotated[bool, typer.Option(
        "--json", help="the new job as JSON on stdout's first line, then (following) `watch --json`'s lines")]
    = False,
) -> None:
    """Queue an agent job; print its id (alone on stdout's first line), then watch it unless --no-follow."""
    budgets = {
        "max_tokens": max_tokens, "max_cost_usd": max_cost, "turns": turns, "wall_clock_s": wall_clock,
        "target_speedup": target_speedup,
    }
    body: JsonObject = {**_problem_fields(problem), "budgets": {k: v for k, v in budgets.items() if v is not None}}
    if target is not None:
        body["target"] = target.value
    if llm is not None:
        profile, model = split_llm(llm)
        body["llm_profile"] = profile
        if model is not None:
            body["llm_model"] = model
    if trajectories is not None:
        body["trajectories"] = trajectories
    with open_client(api, key) as client:
        try:
            job = client.submit_job(body)
            if as_json:
                print_json(job)
            else:
                out.print(str(job["id"]), highlight=False)
            err.print(
                f"job {job['id']} {job['state']}: {job_problem_label(job)} on {job['target']} "
                f"(LLM {job_llm_label(job)}); dashboard: {client.config.api_url}/dashboard/jobs/{job['id']}",
                highlight=False,
            )
            if not follow:
                return
            job_id = Reader(job, "the queued job").integer("id")
            state = follow_json(client, job_id) if as_json else follow_job(client, job_id, console=out)
        except ApiRequestError as exc:
            raise api_failure(exc) from None
    raise typer.Exit(JOB_EXIT_CODES.get(state, CliExit.FAILED))

