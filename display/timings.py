"""Time to verdict: the p50 and p95 of each stage's seconds over a set of attempts, the lane's
seconds per attempt kind, and verdicts per hour of lane time.

One table, read the same on the dashboard's job page, in ``kernelloop bench`` reports and in
``benchmarks/iterations.py``. Values come in as plain names and seconds: an attempt's stages as
`vocabulary.stages.StageSeconds.items()` gives them, its kind (`vocabulary.verdict.attempt_kind`) and
its lane seconds (`vocabulary.stages.StageSeconds.lane`); a job's queue wait (created → claimed)
joins as the stage ``queue_wait``. A stage that did not run for an attempt (a cached compile, the
baselines a job's later attempts reuse) is not a zero: each row says over how many attempts it ran.

Percentiles are linear between the closest ranks (numpy's default); Prometheus's
``histogram_quantile`` interpolates within buckets instead, so ``/metrics`` agrees to a bucket.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KIND_ORDER",
    "QUEUE_WAIT",
    "STAGE_ORDER",
    "AttemptSeconds",
    "KindSummary",
    "StagePercentiles",
    "TimeToVerdict",
    "fmt_seconds",
    "percentile",
    "time_to_verdict",
]

QUEUE_WAIT = "queue_wait"
#: The rows' order: the queue wait, then the referee's stages as they run (`StageSeconds`'s fields).
STAGE_ORDER = (QUEUE_WAIT, "header_build", "reference_start", "baselines", "compile", "load", "correctness",
               "timing")
#: `vocabulary.verdict.AttemptKind`'s values, in the order the tables list them.
KIND_ORDER = ("compile_error", "wrong", "correct", "fast", "error")
#: What the rows read as.
_STAGE_LABELS = {QUEUE_WAIT: "queue wait", "header_build": "header build", "reference_start": "reference start",
                 "compile_error": "compile error"}
#: One sentence on what the lane is, under every table.
LANE_NOTE = ("Lane: the stages that hold the device one evaluation at a time (reference start, baselines, load, "
             "correctness, timing); the header build and the compile run beside it.")


def fmt_seconds(value: float | None) -> str:
    """Seconds: two decimals below 10 s, one below 100 s, whole above."""
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def label(name: str) -> str:
    """A stage's or a kind's name as a person reads it."""
    return _STAGE_LABELS.get(name, name)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear between the closest ranks.

    Raises:
        ValueError: no values, or ``q`` outside 0-100.
    """
    if not values:
        raise ValueError("no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0-100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class AttemptSeconds:
    """One attempt as the table counts it."""

    kind: str
    #: Seconds per stage that ran.
    stages: Mapping[str, float]
    lane_s: float


@dataclass(frozen=True)
class StagePercentiles:
    """One stage over the attempts it ran for."""

    stage: str
    n: int
    p50_s: float
    p95_s: float
    total_s: float

    @property
    def label(self) -> str:
        return label(self.stage)

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "n": self.n, "p50_s": round(self.p50_s, 3), "p95_s": round(self.p95_s, 3),
                "total_s": round(self.total_s, 3)}


@dataclass(frozen=True)
class KindSummary:
    """The attempts of one kind (``all``: every attempt): how many, and their lane seconds."""

    kind: str
    attempts: int
    lane_s: float
    p50_lane_s: float
    p95_lane_s: float

    @property
    def label(self) -> str:
        return label(self.kind)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "attempts": self.attempts, "lane_s": round(self.lane_s, 3),
                "p50_lane_s": round(self.p50_lane_s, 3), "p95_lane_s": round(self.p95_lane_s, 3)}


@dataclass(frozen=True)
class TimeToVerdict:
    """The table over a set of attempts (a job's, a bench's, a benchmark's)."""

    attempts: int
    lane_s: float
    #: Each stage that ran for at least one attempt (and the queue wait, when one was given).
    stages: tuple[StagePercentiles, ...]
    #: Each kind with attempts, then ``all``.
    kinds: tuple[KindSummary, ...]
    #: The stages again, per kind of attempt.
    stages_by_kind: tuple[tuple[str, tuple[StagePercentiles, ...]], ...]

    @property
    def verdicts_per_lane_hour(self) -> float | None:
        """Attempts judged per hour of lane time (on cuda: per GPU-hour); None without lane time."""
        return self.attempts * 3600.0 / self.lane_s if self.lane_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        per_hour = self.verdicts_per_lane_hour
        return {
            "attempts": self.attempts, "lane_s": round(self.lane_s, 3),
            "verdicts_per_lane_hour": round(per_hour, 1) if per_hour is not None else None,
            "stages": [row.to_dict() for row in self.stages],
            "kinds": [row.to_dict() for row in self.kinds],
            "stages_by_kind": {kind: [row.to_dict() for row in rows] for kind, rows in self.stages_by_kind},
        }

    def markdown(self, *, by_kind: bool = False) -> str:
        """The tables as Markdown (``by_kind``: also each stage per kind of attempt)."""
        per_hour = self.verdicts_per_lane_hour
        lines = [f"{self.attempts} attempts, {fmt_seconds(self.lane_s)} s of lane time: "
                 f"**{'—' if per_hour is None else f'{per_hour:,.0f}'} verdicts per lane-hour** (GPU-hour on cuda).",
                 "", "| stage | attempts | p50 s | p95 s | total s |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {r.label} | {r.n} | {fmt_seconds(r.p50_s)} | {fmt_seconds(r.p95_s)} | {fmt_seconds(r.total_s)} |"
                  for r in self.stages]
        lines += ["", "| attempt kind | attempts | lane s | p50 lane s | p95 lane s |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {k.label} | {k.attempts} | {fmt_seconds(k.lane_s)} | {fmt_seconds(k.p50_lane_s)} "
                  f"| {fmt_seconds(k.p95_lane_s)} |" for k in self.kinds]
        if by_kind and self.stages_by_kind:
            lines += ["", "| attempt kind | stage | attempts | p50 s | p95 s | total s |",
                      "|---|---|---:|---:|---:|---:|"]
            lines += [f"| {label(kind)} | {r.label} | {r.n} | {fmt_seconds(r.p50_s)} | {fmt_seconds(r.p95_s)} "
                      f"| {fmt_seconds(r.total_s)} |" for kind, rows in self.stages_by_kind for r in rows]
        lines += ["", LANE_NOTE + " A stage's row counts the attempts it ran for (a cached compile runs none).", ""]
        return "\n".join(lines)


def _ordered(names: Iterable[str], order: Sequence[str]) -> list[str]:
    known = set(names)
    return [n for n in order if n in known] + sorted(known - set(order))


def _stage_rows(attempts: Sequence[AttemptSeconds], queue_waits: Sequence[float]) -> tuple[StagePercentiles, ...]:
    seconds: dict[str, list[float]] = {QUEUE_WAIT: list(queue_waits)} if queue_waits else {}
    for attempt in attempts:
        for stage, value in attempt.stages.items():
            seconds.setdefault(stage, []).append(value)
    return tuple(
        StagePercentiles(stage=stage, n=len(values), p50_s=percentile(values, 50), p95_s=percentile(values, 95),
                         total_s=sum(values))
        for stage in _ordered(seconds, STAGE_ORDER) if (values := seconds[stage])
    )


def _kind_row(kind: str, attempts: Sequence[AttemptSeconds]) -> KindSummary:
    lane = [a.lane_s for a in attempts]
    return KindSummary(kind=kind, attempts=len(attempts), lane_s=sum(lane), p50_lane_s=percentile(lane, 50),
                       p95_lane_s=percentile(lane, 95))


def time_to_verdict(attempts: Iterable[AttemptSeconds], *, queue_waits: Iterable[float] = ()) -> TimeToVerdict:
    """The table over ``attempts``, with the queue waits of their jobs (one per job) as a stage."""
    listed = list(attempts)
    by_kind: dict[str, list[AttemptSeconds]] = {}
    for attempt in listed:
        by_kind.setdefault(attempt.kind, []).append(attempt)
    kinds = _ordered(by_kind, KIND_ORDER)
    return TimeToVerdict(
        attempts=len(listed),
        lane_s=sum(a.lane_s for a in listed),
        stages=_stage_rows(listed, list(queue_waits)),
        kinds=(*(_kind_row(k, by_kind[k]) for k in kinds), *((_kind_row("all", listed),) if listed else ())),
        stages_by_kind=tuple((k, _stage_rows(by_kind[k], ())) for k in kinds),
    )
