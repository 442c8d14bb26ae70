"""``kernelloop jobs``, ``cancel``, ``messages`` and ``logs``: list a key's jobs, stop one, read what
its LLM said and what happened to it."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

from cli.client.columns import Cell, Column, cell_text, show_rows
from cli.client.http import ApiClient, ApiOpt, ApiRequestError, KeyOpt, api_failure, open_client
from cli.client.output import (
    CliExit,
    JsonOpt,
    err,
    job_llm_label,
    job_problem_label,
    json_count,
    json_items,
    json_object,
    out,
    print_json,
)
from display import finite, fmt_speedup, fmt_usd
from vocabulary.evaluation import Target
from vocabulary.events import EventType
from vocabulary.wire import JsonObject, JsonValue, Reader

#: States a job never leaves.
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
#: ``messages --follow`` asks for new messages this often.
FOLLOW_POLL_S = 1.0
#: ``logs`` without ``--follow``: a stream silent this long has sent every stored event.
LOGS_IDLE_S = 1.5
_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
_STATE_STYLE = {"queued": "cyan", "running": "yellow", "succeeded": "green", "failed": "red", "cancelled": "dim"}


def _when(value: JsonValue) -> str:
    if not value or not isinstance(value, str):
        return "—"
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


#: The columns of ``kernelloop jobs``: ids and problems never cut; on a narrow terminal the creation
#: time, the cost, the LLM, the target and the attempts make room first. Off a terminal a last
#: column says why a job failed or was cancelled, whole; on one, lines under the table do.
JOB_COLUMNS = (
    Column("id", "right", key=True), Column("state", key=True), Column("problem", key=True),
    Column("target", key=True, drop=4), Column("LLM", key=True, drop=5), Column("attempts", "right", key=True, drop=3),
    Column("best vs eager", "right", key=True), Column("cost", "right", key=True, drop=6),
    Column("created", key=True, drop=7),
)
WHY_COLUMN = Column("why")


def job_rows(items: Sequence[Mapping[str, JsonValue]]) -> list[list[Cell]]:
    """One row per job, as `JOB_COLUMNS` name them."""
    rows: list[list[Cell]] = []
    for job in items:
        best = json_object(job.get("best"))
        state = str(job.get("state"))
        why = str(job.get("error") or "") if state in ("failed", "cancelled") else ""
        rows.append([
            str(job["id"]), Text(state, _STATE_STYLE.get(state, "white")), job_problem_label(job),
            str(job.get("target")), job_llm_label(job), str(job.get("attempts_count", 0)),
            fmt_speedup(best.get("speedup_vs_eager")), fmt_usd(job.get("cost_usd")), _when(job.get("created_at")),
            why,
        ])
    return rows


def jobs(
    api: ApiOpt = None,
    key: KeyOpt = None,
    state: Annotated[str | None, typer.Option(help=f"only jobs in this state: {', '.join(_STATES)}")] = None,
    problem: Annotated[str | None, typer.Option(help="only jobs of this bundled problem id (or posted sha256)")]
    = None,
    target: Annotated[Target | None, typer.Option("--target", "-t", help="only jobs on this target")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="at most this many, newest first")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """List your jobs (every job for an admin key), newest first."""
    if state is not None and state not in _STATES:
        err.print(f"[red]error:[/red] --state {escape(state)!r} is not a state; use one of: {', '.join(_STATES)}")
        raise typer.Exit(CliExit.USAGE)
    found: list[JsonObject] = []
    total: int | None = None
    with open_client(api, key) as client:
        try:
            offset: int | None = 0
            while offset is not None and len(found) < limit:
                page = client.list_jobs(state=state, target=target.value if target else None, problem=problem,
                                        limit=min(limit - len(found), 200), offset=offset)
                found.extend(page.items)
                total = page.total
                offset = page.next_cursor
        except ApiRequestError as exc:
            raise api_failure(exc) from None
    if as_json:
        print_json({"items": found, "total": total})
        return
    filters = ", ".join(f"{k} {v}" for k, v in (("state", state), ("problem", problem),
                                                 ("target", target.value if target else None)) if v)
    if not found:
        err.print("no jobs" + (f" match ({filters})" if filters else " yet: `kernelloop submit PROBLEM` queues one"))
        return
    shown = f"{len(found)} of {total}" if total is not None and total > len(found) else str(len(found))
    title = f"{shown} jobs" + (f" ({filters})" if filters else "")
    rows = job_rows(found)
    if not out.is_terminal:
        show_rows(out, (*JOB_COLUMNS, WHY_COLUMN), rows, title=title)
        return
    show_rows(out, JOB_COLUMNS, [row[:-1] for row in rows], title=title)
    for row in rows:  # why, whole, wrapped at words by the terminal's width
        if cell_text(row[-1]) != "—":
            out.print(f"job {row[0]} {cell_text(row[1])}: {escape(cell_text(row[-1]))}", highlight=False)


def cancel(
    job: Annotated[int, typer.Argument(help="the job id (see `kernelloop jobs`)", min=1)],
    api: ApiOpt = None,
    key: KeyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a job: a queued one at once, a running one at its worker's next safe point."""
    with open_client(api, key) as client:
        try:
            answer = client.cancel_job(job)
        except ApiRequestError as exc:
            if exc.status == 409:
                state = client.get_job(job)["state"] if exc.code == "illegal_transition" else "finished"
                err.print(f"[red]error:[/red] job {job} already {state}; there is nothing to cancel")
                raise typer.Exit(CliExit.FAILED) from None
            raise api_failure(exc) from None
    if as_json:
        print_json(answer)
        return
    outcome = Reader(answer, "the cancel's answer").text("outcome")
    said = {
        "cancelled": f"job {job} cancelled",
        "requested": f"job {job} is running: its worker stops it at the next safe point "
                     f"(`kernelloop watch {job}` shows when)",
        "already_finished": f"job {job} was already cancelled",
    }[outcome]
    out.print(said, highlight=False)


# -- messages -------------------------------------------------------------------------------------


def _tool_call_line(call: JsonValue, *, full: bool) -> str:
    call = json_object(call)
    function = json_object(call.get("function"))
    name = function.get("name") or call.get("name") or "?"
    arguments = function.get("arguments", call.get("arguments"))
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    if not isinstance(arguments, dict):
        return f"→ {name}({'' if arguments is None else arguments})"
    parts = []
    for arg, value in arguments.items():
        text = str(value)
        if not full and "\n" in text:
            parts.append(f"{arg}=<{text.count(chr(10)) + 1} lines>")
        else:
            parts.append(f"{arg}={text if full else text[:60]}")
    return f"→ {name}({', '.join(parts)})"


def render_message(message: Mapping[str, JsonValue], *, full: bool) -> str:
    """A message as a person reads it: who, when, tokens, then the whole text (tool sources folded
    to their line count unless ``full``)."""
    role = str(message.get("role"))
    tokens = []
    if message.get("tokens_in") or message.get("tokens_out"):
        tokens.append(f"{json_count(message.get('tokens_in')):,} in / {json_count(message.get('tokens_out')):,} out")
    latency_ms = finite(message.get("latency_ms"))
    if latency_ms:
        tokens.append(f"{latency_ms / 1000:.1f} s")
    if message.get("cost_usd"):
        tokens.append(fmt_usd(message["cost_usd"]))
    colour = {"assistant": "cyan", "user": "green", "tool": "magenta", "system": "dim"}.get(role, "white")
    head = (f"[bold {colour}]{role}[/] [dim]trajectory {message.get('trajectory_id')} · #{message.get('seq')} · "
            f"{_when(message.get('created_at'))}" + (f" · {' · '.join(tokens)}" if tokens else "") + "[/]")
    body = [escape(str(message.get("content") or "").rstrip())]
    body += [escape(_tool_call_line(c, full=full)) for c in json_items(message.get("tool_calls"))]
    return "\n".join([head, *[b for b in body if b]])


def messages(
    job: Annotated[int, typer.Argument(help="the job id", min=1)],
    api: ApiOpt = None,
    key: KeyOpt = None,
    trajectory: Annotated[int | None, typer.Option(min=0, help="only this trajectory (0-based)")] = None,
    full: Annotated[bool, typer.Option("--full", help="print the sources the LLM passed to its tools too")] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new messages until the job ends")]
    = False,
    as_json: JsonOpt = False,
) -> None:
    """The LLM conversation of a job: every message in full, tool calls summarised (JSON lines with --json)."""
    with open_client(api, key) as client:
        try:
            _print_messages(client, job, trajectory=trajectory, full=full, follow=follow, as_json=as_json)
        except ApiRequestError as exc:
            raise api_failure(exc) from None
        except KeyboardInterrupt:
            raise typer.Exit(CliExit.INTERRUPTED) from None


def _print_messages(client: ApiClient, job: int, *, trajectory: int | None, full: bool, follow: bool,
                    as_json: bool) -> None:
    after, printed = 0, 0
    while True:
        state = client.get_job(job)["state"] if follow else None
        while True:
            page = client.messages(job, after=after, trajectory=trajectory)
            for message in page.items:
                printed += 1
                if as_json:
                    print_json(message)
                else:
                    out.print(render_message(message, full=full), highlight=False)
                    out.print()
            after = Reader(page.items[-1], "a message").integer("id") if page.items else after
            if page.next_cursor is None:
                break
        if not follow or state in TERMINAL_STATES:
            break
        time.sleep(FOLLOW_POLL_S)
    if not printed:
        err.print(f"job {job} has no messages yet")


# -- logs: the job's events -----------------------------------------------------------------------


def _words(text: str, limit: int) -> str:
    """The first line of ``text``, at most ``limit`` characters, cut between words."""
    line = text.strip().split("\n", 1)[0]
    if len(line) <= limit and line == text.strip():
        return line
    cut = line[:limit]
    return (cut.rsplit(" ", 1)[0] if " " in cut and len(line) > limit else cut).rstrip(" ,.;:") + " …"


def describe_event(event_type: str, data: JsonValue) -> str:
    """One event in words (the SSE payloads of `api.streaming`)."""
    d = data if isinstance(data, dict) else {"value": data}
    if event_type == EventType.STATE:
        why = d.get("error") or d.get("reason")
        return f"job is {d.get('state')}" + (f": {why}" if why else "")
    if event_type == EventType.ATTEMPT:
        figures = [f"{k.replace('_', ' ')} {fmt_speedup(d[k])}" for k in ("speedup_vs_eager", "speedup_vs_compile")
                   if d.get(k) is not None]
        return (f"attempt {d.get('n')}: {d.get('tool')} → {d.get('status')} at {d.get('stage')}"
                + (f" ({', '.join(figures)})" if figures else "") + (" — best so far" if d.get("best") else ""))
    if event_type == EventType.MESSAGE:
        tools = ", ".join(str(t) for t in json_items(d.get("tool_calls") or d.get("tools")))
        preview = _words(str(d.get("preview") or ""), 80)
        return (f"{d.get('role')} message" + (f" calling {tools}" if tools else "")
                + (f": {preview}" if preview else ""))
    if event_type == EventType.CANCEL_REQUESTED:
        return "cancel requested"
    if event_type == EventType.TRAJECTORY:
        return f"trajectory {d.get('index', d.get('trajectory_id'))} {d.get('state') or d.get('phase') or ''}".rstrip()
    words = ", ".join(f"{k} {v}" for k, v in d.items() if not isinstance(v, (dict, list)))
    return f"{event_type}" + (f": {words}" if words else "")


def follow_json(client: ApiClient, job_id: int) -> str:
    """``watch --json``: each event as a JSON line until the job ends, then the job itself
    (``{"type": "job", "data": …}``); returns its final state. Reconnects like `follow_job`."""
    after, failures = 0, 0
    while True:
        try:
            for event in client.events(job_id, after=after):
                failures = 0
                if event.type == EventType.END:
                    job = client.get_job(job_id)
                    print_json({"id": None, "type": "job", "data": job})
                    return str(job["state"])
                after = event.id if event.id is not None else after
                print_json({"id": event.id, "type": event.type, "data": event.data})
        except ApiRequestError as exc:
            failures += 1
            if exc.status is not None or failures > 5:
                raise
        time.sleep(1.0)


def logs(
    job: Annotated[int, typer.Argument(help="the job id", min=1)],
    api: ApiOpt = None,
    key: KeyOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing events until the job ends")] = False,
    as_json: JsonOpt = False,
) -> None:
    """The job's events (states, attempts, messages, stages) in order, one a line (JSON lines with --json)."""
    count = 0
    with open_client(api, key) as client:
        try:
            for event in client.events(job, idle_s=None if follow else LOGS_IDLE_S):
                if event.type == EventType.END:
                    break
                count += 1
                if as_json:
                    print_json({"id": event.id, "type": event.type, "data": event.data})
                    continue
                at = event.data.get("at") if isinstance(event.data, dict) else None
                stamp = f"[dim]{_when(at) if isinstance(at, str) else ''}[/] " if at else ""
                out.print(f"[dim]{event.id:>5}[/] {stamp}{escape(describe_event(event.type, event.data))}",
                          highlight=False)
        except ApiRequestError as exc:
            raise api_failure(exc) from None
        except KeyboardInterrupt:
            raise typer.Exit(CliExit.INTERRUPTED) from None
    if not count:
        err.print(f"job {job} has no events yet")
