"""How ``kernelloop bench`` runs a suite: submissions scheduled within the key's quota, a report
kept up to date on disk (so an interrupted bench resumes), and the provenance of the figures.

The scheduler submits problems in suite order while the key has room; a 429 for the key's
concurrent-job quota holds the remaining submissions until one of the bench's jobs ends (or,
when none of them runs, for the ``Retry-After`` the server sent, else a few polls); a 429 for the
daily quota or the cost cap stops submitting (the rest stay "not submitted" in the report, for a
later ``--resume``). Refused problems (422) are recorded, never fatal. After every change the
report's JSON is rewritten (`BenchState.save`), so ``--resume REPORT`` re-attaches the jobs still
running and submits only what was never submitted, whether the last run ended by Ctrl-C, SIGTERM
or a crash.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cli.client.http import ApiClient, ApiRequestError, in_user_terms
from cli.client.output import json_count, json_object
from vocabulary.wire import JsonObject, JsonValue, Reader

__all__ = [
    "BenchInterrupted",
    "BenchState",
    "ProblemRun",
    "bench_provenance",
    "interrupt_on_sigterm",
    "run_suite",
]

TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
#: A problem the bench has not submitted (yet), and one the server refused (422: not a valid problem).
NOT_SUBMITTED = "not submitted"
REFUSED = "refused"
#: Without a Retry-After, a 429 while none of the bench's own jobs runs is retried after this many polls.
QUOTA_RETRY_POLLS = 5
#: Polls in a row that may fail to reach the API (it restarts) before the bench stops (resumable).
MAX_UNREACHABLE_POLLS = 30
#: Provenance fields of a verdict worth a report (docs/architecture.md, "The verdict").
PROVENANCE_FIELDS = ("device", "driver", "torch", "cuda", "cudnn", "python", "harness")


class BenchInterrupted(Exception):
    """Ctrl-C or SIGTERM while the bench ran."""


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM (a CI runner's stop, ``kill``) raises `BenchInterrupted` as Ctrl-C raises KeyboardInterrupt."""

    def stop(_signum: int, _frame: object) -> None:
        raise BenchInterrupted("terminated")

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class ProblemRun:
    """One problem of the bench: its job (once submitted), the job as last read, why it was refused."""

    name: str
    job_id: int | None = None
    #: The job as the API last sent it.
    job: JsonObject | None = None
    refused: str | None = None
    #: The provenance of the verdict the job's figures come from (its best, else its last attempt;
    #: ``{}``: the job has no attempt); None until read.
    provenance: JsonObject | None = None

    @property
    def state(self) -> str:
        if self.refused is not None:
            return REFUSED
        if self.job_id is None:
            return NOT_SUBMITTED
        return str((self.job or {}).get("state") or "queued")

    @property
    def ended(self) -> bool:
        return self.refused is not None or self.state in TERMINAL_STATES

    def to_dict(self) -> JsonObject:
        return {"problem": self.name, "job_id": self.job_id, "state": self.state, "refused": self.refused,
                "job": self.job, "provenance": self.provenance}

    @classmethod
    def from_dict(cls, data: object) -> ProblemRun:
        """A problem's entry of a saved report.

        Raises:
            WireError: a field of the wrong type (``problem`` missing, a ``job_id`` not an integer).
        """
        read = Reader(data, "a problem of the report")
        return cls(name=read.text("problem"), job_id=read.optional_integer("job_id"),
                   job=_object_or_none(read.data.get("job")), refused=read.optional_text("refused"),
                   provenance=_object_or_none(read.data.get("provenance")))


def _object_or_none(value: object) -> JsonObject | None:
    return value if isinstance(value, dict) else None


@dataclass
class BenchState:
    """What a bench has done so far, saved as the report's JSON after every change."""

    path: Path
    #: Written into the report as they are: suite, api_url, the job options, versions.
    header: JsonObject
    runs: list[ProblemRun]
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @classmethod
    def load(cls, path: Path) -> BenchState:
        """A report written by an earlier (possibly interrupted) bench.

        Raises:
            ValueError: the file is not a bench report.
        """
        try:
            data = json.loads(path.read_text())
            runs = Reader(data, str(path)).items_of("problems", ProblemRun.from_dict)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a kernelloop bench report: {exc}") from None
        header = {k: v for k, v in data.items() if k not in ("problems", "summary", "created_at", "updated_at",
                                                             "finished", "interrupted", "provenance",
                                                             "time_to_verdict")}
        return cls(path=path, header=header, runs=runs, created_at=str(data.get("created_at") or ""))

    def run(self, name: str) -> ProblemRun | None:
        return next((r for r in self.runs if r.name == name), None)

    def report(self, *, summary: Mapping[str, JsonValue] | None = None,
               results: Sequence[Mapping[str, JsonValue]] = (), interrupted: bool = False,
               time_to_verdict: Mapping[str, JsonValue] | None = None) -> JsonObject:
        """The report's JSON: the header, the provenance, the summary, one entry per problem (and
        the time to verdict over the jobs' attempts, `cli.client.bench_timings`, once known)."""
        by_name = {str(r["problem"]): r for r in results}
        provenance = bench_provenance(self.runs, client=self.header.get("client"))
        return {
            **self.header,
            # The target asked for, else the one the server chose for the jobs.
            "target": self.header.get("target") or provenance["target"],
            "created_at": self.created_at,
            "updated_at": datetime.now(UTC).isoformat(),
            "finished": all(r.ended for r in self.runs),
            "interrupted": interrupted,
            "provenance": provenance,
            "summary": dict(summary) if summary is not None else None,
            "problems": [{**by_name.get(r.name, {}), **r.to_dict()} for r in self.runs],
            **({"time_to_verdict": dict(time_to_verdict)} if time_to_verdict is not None else {}),
        }

    def save(self, *, summary: Mapping[str, JsonValue] | None = None,
             results: Sequence[Mapping[str, JsonValue]] = (), interrupted: bool = False,
             time_to_verdict: Mapping[str, JsonValue] | None = None) -> None:
        """Rewrite the report (`report`'s arguments) atomically (a crash mid-write leaves the previous one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        report = self.report(summary=summary, results=results, interrupted=interrupted,
                             time_to_verdict=time_to_verdict)
        scratch.write_text(json.dumps(report, indent=2, default=str) + "\n")
        os.replace(scratch, self.path)


def _common(values: Sequence[JsonValue]) -> JsonValue:
    """One value if all agree, else the distinct values (a bench spread over devices says so)."""
    distinct = sorted({v for v in values if v is not None}, key=str)
    if not distinct:
        return None
    return distinct[0] if len(distinct) == 1 else distinct


def bench_provenance(runs: Sequence[ProblemRun], *, client: JsonValue = None) -> JsonObject:
    """Where the figures were measured: the jobs' target (as the server chose it), and the device,
    driver and versions of their verdicts; ``client``: this CLI's versions."""
    measured = [r.provenance for r in runs if r.provenance]
    facts: JsonObject = {"target": _common([(r.job or {}).get("target") for r in runs])}
    for name in PROVENANCE_FIELDS:
        facts[name] = _common([p.get(name) for p in measured])
    facts["measured_jobs"] = len(measured)
    facts["client"] = client
    return facts


def _verdict_provenance(client: ApiClient, job: JsonObject) -> JsonObject:
    """The provenance of the job's best verdict, else of its last attempt's (``{}``: no attempt)."""
    job_id = Reader(job, "a bench job").integer("id")
    attempts = json_count(job.get("attempts_count"))
    try:
        if job.get("best"):
            attempt = client.best_attempt(job_id)
        elif attempts > 0:
            attempt = client.attempt(job_id, attempts)
        else:
            return {}
    except ApiRequestError as exc:
        if exc.status == 404:
            return {}
        raise
    provenance = json_object(json_object(attempt.get("verdict")).get("provenance"))
    return {k: provenance.get(k) for k in ("target", *PROVENANCE_FIELDS)}


@dataclass(frozen=True)
class Submission:
    """A problem to submit: its name and the job body (problem fields and job options)."""

    name: str
    body: JsonObject


def run_suite(
    client: ApiClient,
    state: BenchState,
    submissions: Sequence[Submission],
    *,
    poll_s: float,
    timeout_s: float | None,
    on_change: Callable[[str], None],
) -> bool:
    """Submit what was never submitted, within the key's quota; follow every job until it ends.

    ``state`` is saved after each submission and each job's end; ``on_change`` gets a line to show.
    Returns whether every problem ended (``False``: the timeout came first).

    Raises:
        ApiRequestError: the API failed otherwise than with a quota or a refused problem (unreachable,
            bad key): the state saved so far can be resumed.
        KeyboardInterrupt, BenchInterrupted: the caller saves a partial report.
    """
    runs = {r.name: r for r in state.runs}
    for item in submissions:
        if item.name not in runs:
            runs[item.name] = ProblemRun(item.name)
            state.runs.append(runs[item.name])
    waiting = [s for s in submissions if runs[s.name].job_id is None and runs[s.name].refused is None]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    hold_until: float = 0.0  # no submission before this (a 429 said the key is full)
    held_for_ours = False  # … or until one of our jobs ends
    stopped: str | None = None  # a quota that will not free up during this run
    unreachable = 0  # polls in a row that could not reach the API
    while True:
        while waiting and stopped is None and not held_for_ours and time.monotonic() >= hold_until:
            item = waiting[0]
            run = runs[item.name]
            try:
                job = client.submit_job(item.body)
            except ApiRequestError as exc:
                if exc.status == 429:
                    running = sum(1 for r in state.runs if r.job_id is not None and not r.ended)
                    if exc.quota_name == "max_concurrent_jobs" and running:
                        held_for_ours = True
                        limit = json_count((exc.quota or {}).get("limit")) or running
                        on_change(f"the key's {limit} concurrent jobs "
                                  f"are running; {len(waiting)} problems wait for a free slot")
                    elif exc.quota_name == "max_concurrent_jobs":
                        hold_until = time.monotonic() + (exc.retry_after_s or poll_s * QUOTA_RETRY_POLLS)
                        on_change("the key's concurrent-job quota is taken by other jobs; waiting")
                    else:
                        stopped = in_user_terms(exc)
                        on_change(f"not submitting the remaining {len(waiting)} problems: {stopped}")
                    break
                if exc.status in (400, 404, 413, 422):
                    run.refused = in_user_terms(exc)
                    waiting.pop(0)
                    state.save()
                    on_change(f"{item.name}: refused: {run.refused}")
                    continue
                raise
            run.job_id, run.job = Reader(job, "the queued job").integer("id"), dict(job)
            waiting.pop(0)
            state.save()
            on_change(f"job {run.job_id} {job['state']}: {item.name}")
        # Followed until ended with its provenance read: a report saved between those two reads
        # (an interrupt) has a run that ended without it, read on resuming.
        live = [r for r in state.runs if r.job_id is not None and (not r.ended or r.provenance is None)]
        for run in live:
            assert run.job_id is not None
            try:
                run.job = client.get_job(run.job_id)
                unreachable = 0
            except ApiRequestError as exc:
                # A restarting API is waited for; a refusal (401, 404) is not.
                unreachable += 1
                if exc.status is not None or unreachable > MAX_UNREACHABLE_POLLS:
                    raise
                on_change(f"{exc.detail}; trying again")
                break
            if run.ended:
                run.provenance = _verdict_provenance(client, run.job)
                held_for_ours = False
                state.save()
                on_change(f"job {run.job_id} {run.state}: {run.name}")
        if all(r.ended for r in state.runs if r.job_id is not None) and (not waiting or stopped is not None):
            return not waiting
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
