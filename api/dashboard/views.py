"""What the dashboard's pages show, as frozen values built from store rows and verdicts.

The routes (`api.routes.dashboard`) read the store; this module turns what they read into the
values the templates (`api.dashboard.pages`) render: the messages timeline of a job, its
trajectories as chart series, the events that say what the worker is doing now, an
attempt's verdict as tables and a plot and its diffs, and what a problem's jobs measured of its
work. Nothing here touches the database or HTML.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from api.dashboard.highlight import DiffLine, count_changes, diff_lines
from api.dashboard.profiles import ProfileLine, profile_lines
from display import finite
from store import Attempt, Job, JobEvent, Message, ProblemJobWork, Trajectory, tool_call_names
from vocabulary.verdict import Status, Verdict
from vocabulary.wire import JsonObject

__all__ = [
    "MAX_PAGE_ATTEMPTS",
    "MESSAGE_FULL_CHARS",
    "MESSAGE_PREVIEW_CHARS",
    "AttemptDiff",
    "AttemptView",
    "Diff",
    "EventView",
    "MarkKind",
    "PlotSeries",
    "SamplePlot",
    "TimelineEntry",
    "TrajectoryView",
    "WorkFigures",
    "attempt_view",
    "elapsed_s",
    "event_views",
    "mark_kind",
    "sample_plot",
    "timeline",
    "trajectory_views",
    "work_figures",
]

#: Attempts a job's page and charts show (newer ones still arrive live); a job past this is unusual.
MAX_PAGE_ATTEMPTS = 2000
#: Characters of a message shown in the timeline before it is opened.
MESSAGE_PREVIEW_CHARS = 240
#: Characters of a message shown when opened (the whole of it is at ``/jobs/{id}/messages``).
MESSAGE_FULL_CHARS = 8000


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def elapsed_s(job: Job, now: datetime) -> float | None:
    """Seconds the job has run (until ``now`` while it runs); ``None`` before it started."""
    if job.started_at is None:
        return None
    end = job.finished_at or now
    return max(0.0, (end - job.started_at).total_seconds())


# -- chart marks ---------------------------------------------------------------------------------


class MarkKind(StrEnum):
    """How the chart draws an attempt (``markKind`` in ``static/dashboard.js`` is the same rule)."""

    #: Timed: a point at its speedup.
    TIMED = "timed"
    #: Passed without timing (``compile``, ``check_correctness``, ``profile``): a hollow mark in the
    #: "untimed" lane, in its trajectory's colour.
    UNTIMED = "untimed"
    #: Failed or errored: a red cross in the "failed" lane.
    FAILED = "failed"


def mark_kind(status: str, speedup_vs_eager: float | None) -> MarkKind:
    """The chart mark of an attempt with this status and speedup."""
    speedup = finite(speedup_vs_eager)
    if speedup is not None and speedup > 0:
        return MarkKind.TIMED
    if status in (Status.PASS, Status.SUSPICIOUS):
        return MarkKind.UNTIMED
    return MarkKind.FAILED


@dataclass(frozen=True)
class TrajectoryView:
    """One trajectory as a chart series: its id (attempts name it), index, state and settings."""

    id: int
    index: int
    state: str
    temperature: float | None
    strategy: str | None

    @property
    def label(self) -> str:
        parts = [f"trajectory {self.index}"]
        if self.temperature is not None:
            parts.append(f"T={self.temperature:g}")
        if self.strategy:
            parts.append(self.strategy)
        return " · ".join(parts)

    def to_json(self) -> JsonObject:
        return {"id": self.id, "index": self.index, "state": self.state, "label": self.label}


def trajectory_views(trajectories: Iterable[Trajectory]) -> tuple[TrajectoryView, ...]:
    return tuple(
        TrajectoryView(id=t.id, index=t.index, state=t.state.value, temperature=t.temperature,
                       strategy=t.strategy_hint)
        for t in sorted(trajectories, key=lambda t: t.index)
    )


# -- messages timeline ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TimelineEntry:
    """A message of the agent's conversation, or an attempt judged, in the order they happened."""

    kind: str  # "message" or "attempt"
    at: datetime
    trajectory_index: int | None
    role: str = ""
    tool_calls: tuple[str, ...] = ()
    preview: str = ""
    content: str = ""
    truncated: bool = False
    tokens: int = 0
    latency_ms: float | None = None
    attempt_n: int | None = None
    status: str = ""
    tool: str = ""
    speedup_vs_eager: float | None = None

    @property
    def short(self) -> bool:
        """Whether the preview is the whole message (then nothing needs opening)."""
        return not self.truncated and " ".join(self.content.split()) == self.preview


def _preview(text: str) -> str:
    """The start of ``text`` on one line, cut at a word boundary."""
    flat = " ".join(text.split())
    if len(flat) <= MESSAGE_PREVIEW_CHARS:
        return flat
    cut = flat.rfind(" ", 0, MESSAGE_PREVIEW_CHARS)
    return flat[: cut if cut > MESSAGE_PREVIEW_CHARS // 2 else MESSAGE_PREVIEW_CHARS] + " …"


def timeline(
    messages: Iterable[Message], attempts: Iterable[Attempt], trajectories: Sequence[TrajectoryView]
) -> tuple[TimelineEntry, ...]:
    """Messages and attempts of a job in time order (messages first when they tie)."""
    index_of = {t.id: t.index for t in trajectories}
    entries: list[tuple[datetime, int, int, TimelineEntry]] = []
    for m in messages:
        content = m.content or ""
        entry = TimelineEntry(
            kind="message", at=_utc(m.created_at), trajectory_index=index_of.get(m.trajectory_id), role=m.role,
            tool_calls=tuple(tool_call_names(m.tool_calls)), preview=_preview(content),
            content=content[:MESSAGE_FULL_CHARS],
            truncated=len(content) > MESSAGE_FULL_CHARS, tokens=m.tokens_in + m.tokens_out, latency_ms=m.latency_ms,
        )
        entries.append((entry.at, 0, m.id, entry))
    for a in attempts:
        entry = TimelineEntry(
            kind="attempt", at=_utc(a.created_at),
            trajectory_index=index_of.get(a.trajectory_id) if a.trajectory_id is not None else None,
            attempt_n=a.n, status=a.status.value, tool=a.tool, speedup_vs_eager=a.speedup_vs_eager,
            preview=str((a.verdict or {}).get("message", ""))[:MESSAGE_PREVIEW_CHARS],
        )
        entries.append((entry.at, 1, a.n, entry))
    return tuple(e for *_, e in sorted(entries, key=lambda e: e[:3]))


# -- live events ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventView:
    """A stored job event as the page's script replays it: the SSE fields plus when it was stored."""

    id: int
    type: str
    data: JsonObject
    at: datetime

    def to_json(self) -> JsonObject:
        return {"id": self.id, "type": self.type, "data": self.data, "at": self.at.isoformat()}


def event_views(events: Iterable[JobEvent]) -> tuple[EventView, ...]:
    return tuple(EventView(id=e.id, type=e.type, data=dict(e.payload or {}), at=_utc(e.created_at)) for e in events)


# -- an attempt ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlotSeries:
    """One series of the timing plot: its samples as (x, y) in the SVG's coordinates, its median."""

    name: str
    css: str
    points: tuple[tuple[float, float], ...]
    median_ms: float
    median_y: float
    n: int


@dataclass(frozen=True)
class SamplePlot:
    """The timing samples of an attempt and its baselines, laid out for an inline SVG."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    log_scale: bool
    series: tuple[PlotSeries, ...]
    ticks: tuple[tuple[float, str], ...]  # (y, label)

    @property
    def plot_width(self) -> int:
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> int:
        return self.height - self.top - self.bottom


#: Above this ratio between the slowest and the fastest sample the plot's axis is logarithmic.
LOG_SCALE_RATIO = 8.0
_PLOT_W, _PLOT_H, _PLOT_L, _PLOT_R, _PLOT_T, _PLOT_B = 860, 240, 56, 230, 14, 30


def _ticks(lo: float, hi: float, log_scale: bool) -> list[float]:
    if log_scale:
        first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        values = [10.0**e * m for e in range(first, last + 1) for m in (1, 2, 5)]
    else:
        raw = (hi - lo) / 5 or hi or 1.0
        step = 10 ** math.floor(math.log10(raw))
        step *= next(m for m in (1, 2, 5, 10) if raw <= step * m)
        start = math.floor(lo / step) * step
        values = [start + i * step for i in range(0, 12)]
    return [v for v in values if lo <= v <= hi]


def sample_plot(verdict: Verdict) -> SamplePlot | None:
    """The candidate's timing samples beside eager's and ``torch.compile``'s; ``None`` if untimed."""
    named = [("candidate", "cand", verdict.timing)]
    if verdict.baselines is not None:
        named += [("eager", "eager", verdict.baselines.eager),
                  ("torch.compile", "compile", verdict.baselines.torch_compile)]
    present = [(name, css, t) for name, css, t in named if t is not None and t.samples_ms]
    if verdict.timing is None or not present:
        return None
    values = [s for _, _, t in present for s in t.samples_ms if s > 0]
    if not values:
        return None
    lo, hi = min(values), max(values)
    log_scale = hi / lo > LOG_SCALE_RATIO
    if log_scale:
        lo, hi = lo / 1.15, hi * 1.15
    else:
        pad = (hi - lo) * 0.08 or hi * 0.05 or 1.0
        lo, hi = max(0.0, lo - pad), hi + pad
    plot_w = _PLOT_W - _PLOT_L - _PLOT_R
    plot_h = _PLOT_H - _PLOT_T - _PLOT_B

    def y(ms: float) -> float:
        if log_scale:
            frac = (math.log(max(ms, lo)) - math.log(lo)) / (math.log(hi) - math.log(lo))
        else:
            frac = (ms - lo) / (hi - lo)
        return round(_PLOT_T + plot_h * (1 - frac), 1)

    series = []
    for name, css, timing in present:
        n = len(timing.samples_ms)
        points = tuple(
            (round(_PLOT_L + plot_w * ((i + 0.5) / n), 1), y(s)) for i, s in enumerate(timing.samples_ms) if s > 0
        )
        series.append(PlotSeries(name=name, css=css, points=points, median_ms=timing.median_ms,
                                 median_y=y(timing.median_ms), n=n))
    ticks = tuple((y(v), f"{v:g}") for v in _ticks(lo, hi, log_scale))
    return SamplePlot(width=_PLOT_W, height=_PLOT_H, left=_PLOT_L, right=_PLOT_R, top=_PLOT_T, bottom=_PLOT_B,
                      log_scale=log_scale, series=tuple(series), ticks=ticks)


@dataclass(frozen=True)
class Diff:
    """A unified diff from an old source to a new one (the "−" lines are the old one's)."""

    lines: tuple[DiffLine, ...]
    added: int
    removed: int

    @classmethod
    def between(cls, old: str, new: str) -> Diff:
        lines = diff_lines(old, new)
        added, removed = count_changes(lines)
        return cls(lines=lines, added=added, removed=removed)

    @property
    def identical(self) -> bool:
        return not self.lines


@dataclass(frozen=True)
class AttemptDiff:
    """An attempt's source against another attempt's (the other one is the diff's "−" side)."""

    against: str  # "parent" or "best"
    other_n: int
    diff: Diff


def _attempt_diff(against: str, other: Attempt | None, source: str) -> AttemptDiff | None:
    if other is None:
        return None
    return AttemptDiff(against=against, other_n=other.n, diff=Diff.between(other.source, source))


@dataclass(frozen=True)
class AttemptView:
    """One attempt with its verdict parsed, its neighbours and its diffs."""

    n: int
    tool: str
    status: str
    stage: str
    error_kind: str | None
    trajectory_index: int | None
    created_at: datetime
    source: str
    sha256: str
    verdict: Verdict
    #: The verdict's provenance, flattened to (key, text) rows (nested values as JSON).
    provenance: tuple[tuple[str, str], ...]
    parent_n: int | None
    best_n: int | None
    diffs: tuple[AttemptDiff, ...] = field(default=())
    plot: SamplePlot | None = None
    previous_n: int | None = None
    next_n: int | None = None
    profile: tuple[ProfileLine, ...] = ()

    @property
    def compile_errors(self) -> str:
        return self.verdict.compile.errors if self.verdict.compile is not None else ""


def _provenance_rows(provenance: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    rows = []
    for key in sorted(provenance):
        value = provenance[key]
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        rows.append((key, text))
    return tuple(rows)


def attempt_view(
    attempt: Attempt,
    *,
    parent: Attempt | None,
    best: Attempt | None,
    trajectories: Sequence[TrajectoryView],
    attempts_count: int,
) -> AttemptView:
    """The attempt page's content; ``parent`` and ``best`` give its diffs (none against itself)."""
    verdict = attempt.read_verdict()
    index_of = {t.id: t.index for t in trajectories}
    diffs = tuple(
        d for d in (
            _attempt_diff("parent", parent, attempt.source),
            _attempt_diff("best", best if best is not None and best.id != attempt.id else None, attempt.source),
        ) if d is not None
    )
    return AttemptView(
        n=attempt.n, tool=attempt.tool, status=attempt.status.value, stage=attempt.stage,
        error_kind=attempt.error_kind.value if attempt.error_kind else None,
        trajectory_index=index_of.get(attempt.trajectory_id) if attempt.trajectory_id is not None else None,
        created_at=_utc(attempt.created_at), source=attempt.source, sha256=attempt.sha256, verdict=verdict,
        provenance=_provenance_rows(verdict.provenance.to_dict()), parent_n=parent.n if parent is not None else None,
        best_n=best.n if best is not None else None, diffs=diffs, plot=sample_plot(verdict),
        previous_n=attempt.n - 1 if attempt.n > 1 else None,
        next_n=attempt.n + 1 if attempt.n < attempts_count else None, profile=profile_lines(verdict),
    )


# -- a problem's measured work ---------------------------------------------------------------------


@dataclass(frozen=True)
class WorkFigures:
    """What the referee measured about a problem on one device (from a stored verdict)."""

    target: str
    device: str
    flops: float | None
    min_bytes: float | None
    sol_ms: float | None
    eager_ms: float | None
    compile_ms: float | None
    job_id: int

    @property
    def intensity(self) -> float | None:
        return self.flops / self.min_bytes if self.flops and self.min_bytes else None


def work_figures(jobs: Iterable[ProblemJobWork]) -> tuple[WorkFigures, ...]:
    """Per (target, device): FLOPs, bytes and baselines from the first of ``jobs`` (newest first) that measured them."""
    figures: dict[tuple[str, str], WorkFigures] = {}
    for job in jobs:
        verdict = job.verdict
        if verdict is None:
            continue
        ident = (verdict.provenance.target or job.target.value, verdict.provenance.device or "?")
        if ident in figures:
            continue
        eager_ms, compile_ms = verdict.baselines_ms
        figures[ident] = WorkFigures(
            target=ident[0], device=ident[1], flops=verdict.flops, min_bytes=verdict.min_bytes,
            sol_ms=verdict.sol_ms, eager_ms=eager_ms, compile_ms=compile_ms, job_id=job.job_id,
        )
    return tuple(figures.values())
