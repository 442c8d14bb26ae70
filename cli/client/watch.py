"""``kernelloop watch``: a job's attempts live (a redrawn table on a terminal, one line per event elsewhere)."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live

from cli.client.http import ApiClient, ApiOpt, ApiRequestError, KeyOpt, api_failure, open_client
from cli.client.output import JOB_EXIT_CODES, CliExit, err, out
from cli.client.view import JobView
from vocabulary.events import EventType

#: Reconnections in a row without receiving anything before ``watch`` gives up.
MAX_RECONNECTS = 5
RECONNECT_DELAY_S = 1.0
#: The live view of a terminal redraws at most this often.
LIVE_REFRESH_PER_S = 4


def follow_job(client: ApiClient, job_id: int, *, console: Console, live: bool | None = None) -> str:
    """Show a job's attempts as they arrive until it ends; returns its final state.

    On a terminal the table redraws in place; elsewhere (CI logs) one line per event, then the
    table. A stream that closes early (the server rebalances long streams) is resumed from the
    last event id.

    Raises:
        ApiRequestError: the API refused, or the stream broke ``MAX_RECONNECTS`` times in a row.
    """
    view = JobView(job=client.get_job(job_id))
    live = console.is_terminal if live is None else live
    after, failures, last_refresh = 0, 0, 0.0
    final: str | None = None
    # The view renders itself on each refresh, so the running stage's elapsed time moves on its own.
    live_view = Live(view, console=console, refresh_per_second=LIVE_REFRESH_PER_S) if live else None
    if live_view is not None:
        live_view.start()
    try:
        while final is None:
            try:
                for event in client.events(job_id, after=after):
                    failures = 0
                    if event.type == EventType.END:
                        data = event.data if isinstance(event.data, dict) else {}
                        if data.get("deleted"):
                            raise ApiRequestError(f"job {job_id} was deleted while watched", status=404,
                                                  code="not_found")
                        final = str(data.get("state") or "")
                        break
                    if event.id is not None:
                        after = event.id
                    line = view.apply(event.type, event.data)
                    now = time.monotonic()
                    if event.type == EventType.STATE or now - last_refresh > 1.0:
                        view.job = client.get_job(job_id)
                        last_refresh = now
                    if live_view is not None:
                        live_view.refresh()
                    elif line:
                        console.print(line, highlight=False)
            except ApiRequestError as exc:
                if exc.status is not None:
                    raise
                failures += 1
                if failures > MAX_RECONNECTS:
                    raise
                err.print(f"[yellow]{exc.detail}; reconnecting…[/]")
            if final is None:
                time.sleep(RECONNECT_DELAY_S)
        view.job = client.get_job(job_id)
        if live_view is not None:
            live_view.refresh()
    finally:
        if live_view is not None:
            live_view.stop()
    if live_view is None:
        view.show(console)
    for line in view.summary(replay_hint=f"kernelloop replay {job_id}",
                             dashboard_url=f"{client.config.api_url}/dashboard/jobs/{job_id}"):
        console.print(line, highlight=False)
    return final or str(view.job.get("state"))


def watch(
    job: Annotated[int, typer.Argument(help="the job id", min=1)],
    api: ApiOpt = None,
    key: KeyOpt = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="each event as a JSON line, then the final job as {\"type\": \"job\"}")] = False,
) -> None:
    """Follow a job live (attempts, speedups, % of SOL, tokens, cost, budgets); exit by its final state."""
    from cli.client.jobs import follow_json

    with open_client(api, key) as client:
        try:
            state = follow_json(client, job) if as_json else follow_job(client, job, console=out)
        except ApiRequestError as exc:
            raise api_failure(exc) from None
    raise typer.Exit(JOB_EXIT_CODES.get(state, CliExit.FAILED))

