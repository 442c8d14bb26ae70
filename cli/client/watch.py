"""``kernelloop watch``: a job's attempts live (a redrawn table on a terminal, one line per event elsewhere)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from cli.client.http import ApiClient, ApiError, ApiOpt, KeyOpt, SseEvent, api_failure, open_client
from cli.client.output import (
    JOB_EXIT_CODES,
    ExitCode,
    err,
    fmt_ms,
    fmt_pct,
    fmt_usd,
    fmt_x,
    out,
    problem_name,
    status_text,
)
from store.payloads import AttemptPayload, CancelRequestedPayload, StatePayload, parse_payload

#: Reconnections in a row without receiving anything before ``watch`` gives up.
MAX_RECONNECTS = 5
RECONNECT_DELAY_S = 1.0
#: The live view of a terminal redraws at most this often.
LIVE_REFRESH_PER_S = 4


@dataclass
class JobView:
    """What ``watch`` shows: the job as last read, and its attempts as their events arrived."""

    job: dict[str, Any]
    attempts: dict[int, dict[str, Any]] = field(default_factory=dict)

    def apply(self, event: SseEvent) -> str | None:
        """Take one event in; returns a one-line summary of it for a log, if it says anything."""
        payload = parse_payload(event.type, event.data)
        if isinstance(payload, AttemptPayload):
            a = payload
            self.attempts[a.n] = {**self.attempts.get(a.n, {}), **a.to_dict()}
            best = "  [bold green]best[/]" if a.best else ""
            return (
                f"attempt {a.n:>3}  {a.tool:<10} {a.status:<10} "
                f"{fmt_ms(a.median_ms):>9} ms  {fmt_x(a.speedup_vs_eager):>8} vs eager  "
                f"{fmt_x(a.speedup_vs_compile):>8} vs compile  {fmt_pct(a.pct_of_sol):>7} of SOL{best}"
            )
        if isinstance(payload, StatePayload):
            self.job["state"] = payload.state
            reason = payload.error or payload.reason
            return f"job {self.job['id']} is {self.job['state']}" + (f": {reason}" if reason else "")
        if isinstance(payload, CancelRequestedPayload):
            return f"job {self.job['id']}: cancel requested"
        return None

    def budget_line(self) -> str:
        job = self.job
        budgets = job.get("budgets") or {}
        tokens = int(job.get("tokens_in") or 0) + int(job.get("tokens_out") or 0)
        parts = [f"tokens {tokens:,}" + (f" / {int(budgets['max_tokens']):,}" if budgets.get("max_tokens") else "")]
        parts.append(f"cost {fmt_usd(job.get('cost_usd'))}" + (
            f" / {fmt_usd(budgets['max_cost_usd'])}" if budgets.get("max_cost_usd") is not None else ""
        ))
        started = job.get("started_at")
        if started:
            end = job.get("finished_at")
            t1 = datetime.fromisoformat(end) if end else datetime.now(UTC)
            t0 = datetime.fromisoformat(started)
            t0, t1 = (t.replace(tzinfo=t.tzinfo or UTC) for t in (t0, t1))
            elapsed = max(0.0, (t1 - t0).total_seconds())
            wall = budgets.get("wall_clock_s")
            parts.append(f"wall {elapsed:.0f} s" + (f" / {float(wall):.0f} s" if wall else ""))
        parts.append(f"GPU {float(job.get('gpu_seconds') or 0):.1f} s")
        return " · ".join(parts)

    def table(self) -> Table:
        job = self.job
        best = job.get("best") or {}
        table = Table(
            title=f"job {job['id']} · {problem_name(job)} · {job.get('target')} · {job.get('state')}",
            caption=self.budget_line(),
        )
        for name, justify in (
            ("#", "right"), ("traj", "right"), ("tool", "left"), ("status", "left"), ("stage", "left"),
            ("median ms", "right"), ("vs eager", "right"), ("vs compile", "right"), ("% SOL", "right"),
        ):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for n in sorted(self.attempts):
            a = self.attempts[n]
            mark = " ★" if best.get("n") == n else ""
            table.add_row(
                f"{n}{mark}",
                "—" if a.get("trajectory_id") is None else str(a["trajectory_id"]),
                str(a.get("tool", "")),
                status_text(str(a.get("status", ""))), str(a.get("stage", "")), fmt_ms(a.get("median_ms")),
                fmt_x(a.get("speedup_vs_eager")), fmt_x(a.get("speedup_vs_compile")), fmt_pct(a.get("pct_of_sol")),
            )
        return table


def follow_job(client: ApiClient, job_id: int, *, console: Console, live: bool | None = None) -> str:
    """Show a job's attempts as they arrive until it ends; returns its final state.

    On a terminal the table redraws in place; elsewhere (CI logs) one line per event, then the
    table. A stream that closes early (the server rebalances long streams) is resumed from the
    last event id.

    Raises:
        ApiError: the API refused, or the stream broke ``MAX_RECONNECTS`` times in a row.
    """
    view = JobView(job=client.get_job(job_id))
    live = console.is_terminal if live is None else live
    after, failures, last_refresh = 0, 0, 0.0
    final: str | None = None
    live_view = Live(view.table(), console=console, refresh_per_second=LIVE_REFRESH_PER_S) if live else None
    if live_view is not None:
        live_view.start()
    try:
        while final is None:
            try:
                for event in client.events(job_id, after=after):
                    failures = 0
                    if event.type == "end":
                        data = event.data if isinstance(event.data, dict) else {}
                        if data.get("deleted"):
                            raise ApiError(f"job {job_id} was deleted while watched", status=404, code="not_found")
                        final = str(data.get("state") or "")
                        break
                    if event.id is not None:
                        after = event.id
                    line = view.apply(event)
                    now = time.monotonic()
                    if event.type == "state" or now - last_refresh > 1.0:
                        view.job = client.get_job(job_id)
                        last_refresh = now
                    if live_view is not None:
                        live_view.update(view.table())
                    elif line:
                        console.print(line, highlight=False)
            except ApiError as exc:
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
            live_view.update(view.table())
    finally:
        if live_view is not None:
            live_view.stop()
    if live_view is None:
        console.print(view.table())
    job = view.job
    if job.get("error"):
        console.print(f"[red]error:[/red] {job['error']}", highlight=False)
    best = job.get("best")
    if best:
        console.print(
            f"best: attempt {best['n']}, {fmt_ms(best.get('median_ms'))} ms, "
            f"{fmt_x(best.get('speedup_vs_eager'))} vs eager, "
            f"{fmt_x(best.get('speedup_vs_compile'))} vs torch.compile — `kernelloop replay {job_id}`",
            highlight=False,
        )
    return final or str(job.get("state"))


def watch(
    job: Annotated[int, typer.Argument(help="the job id", min=1)],
    api: ApiOpt = None,
    key: KeyOpt = None,
) -> None:
    """Follow a job live (attempts, speedups, % of SOL, tokens, cost, budgets); exit by its final state."""
    with open_client(api, key) as client:
        try:
            state = follow_job(client, job, console=out)
        except ApiError as exc:
            raise api_failure(exc) from None
    raise typer.Exit(JOB_EXIT_CODES.get(state, ExitCode.FAILED))

