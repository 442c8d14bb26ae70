"""Time to verdict in ``kernelloop bench`` reports: the p50 and p95 of each stage over the bench's
attempts (and its jobs' queue waits), lane seconds per attempt kind, and verdicts per lane-hour
(`display.timings`, the table the dashboard's job page shows).

A bench of jobs reads each job's ``GET /jobs/{id}/timings``; a bench of given candidates
(``--candidates``) takes the seconds from the verdicts it judged itself, re-judgings included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cli.client.http import ApiClient, ApiRequestError
from display.timings import AttemptSeconds, TimeToVerdict, time_to_verdict
from vocabulary.verdict import Verdict, attempt_kind
from vocabulary.wire import Reader, WireError

__all__ = ["TIMINGS_HEADING", "jobs_time_to_verdict", "timings_markdown", "verdicts_time_to_verdict"]

TIMINGS_HEADING = "## Time to verdict"


def verdicts_time_to_verdict(verdicts: Iterable[Verdict]) -> TimeToVerdict:
    """The table over verdicts judged here (no queue)."""
    return time_to_verdict(AttemptSeconds(kind=attempt_kind(v).value, stages=dict(v.stage_seconds.items()),
                                          lane_s=v.stage_seconds.lane) for v in verdicts)


def _attempt(item: object) -> AttemptSeconds:
    read = Reader(item, "an attempt's timings")
    stages = read.nested("stage_seconds")
    return AttemptSeconds(kind=read.text("kind"), stages={name: stages.number(name) for name in stages.data},
                          lane_s=read.number("lane_s"))


def jobs_time_to_verdict(client: ApiClient, job_ids: Sequence[int]) -> tuple[TimeToVerdict | None, list[str]]:
    """The table over the attempts of ``job_ids`` (their ``/timings``), and notes on the jobs it
    could not read (an older server without the route, a job deleted since). None: no job read."""
    attempts: list[AttemptSeconds] = []
    waits: list[float] = []
    notes: list[str] = []
    read = 0
    for job_id in job_ids:
        try:
            timings = client.job_timings(job_id)
            attempts += Reader(timings, f"job {job_id}'s timings").items_of("attempts", _attempt)
        except (ApiRequestError, WireError) as exc:
            notes.append(f"job {job_id}: no timings ({exc})")
            continue
        read += 1
        wait = timings.get("queue_wait_s")
        if isinstance(wait, int | float):
            waits.append(float(wait))
    return (time_to_verdict(attempts, queue_waits=waits) if read else None), notes


def timings_markdown(table: TimeToVerdict | None, notes: Sequence[str] = ()) -> str:
    """The report's section: the tables, or why there are none."""
    lines = [TIMINGS_HEADING, ""]
    lines.append(table.markdown() if table is not None else "No timings: no job's could be read.\n")
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + ("\n" if notes else "")
