"""A job's analysis charts, laid out in Python as SVG primitives the templates draw as they are.

- `roofline_chart`: every timed attempt against the speed of light (``sol_ms``, the roofline of the
  problem's FLOPs and minimum bytes on the device): the fraction of the roof it reaches on a log
  axis, with the throughput that means (GB/s of minimum traffic, FLOP/s) on the other axis, the
  roof at 100 %, and where eager PyTorch and ``torch.compile`` sit.
- `usage_chart`: tokens and cost over the job's wall clock, cumulative, with the budgets when they
  are near and each attempt where it was judged.

Everything is a frozen value (`Chart`: rectangles, lines, polylines, marks, labels in the SVG's
coordinates), so the pages render it with one macro and the tests read it without a browser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from display import finite, fmt_ms, fmt_usd
from store import Attempt, Job, UsagePoint
from vocabulary.wire import Reader

__all__ = ["Chart", "JobCharts", "Label", "Line", "Mark", "Polyline", "baselines_ms", "compile_line", "job_charts",
           "roofline_chart", "usage_chart"]


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    css: str


@dataclass(frozen=True)
class Polyline:
    points: str
    css: str


@dataclass(frozen=True)
class Mark:
    """A point (``shape`` ``dot`` or ``tick``), its tooltip and the page it opens."""

    x: float
    y: float
    css: str
    title: str
    href: str | None = None
    shape: str = "dot"
    n: int | None = None


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str
    css: str = "tick"
    anchor: str = "start"
    #: Degrees, about (x, y) (a vertical axis title: -90).
    rotate: int = 0


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    #: Plot areas, as (x, y, width, height).
    areas: tuple[tuple[float, float, float, float], ...]
    lines: tuple[Line, ...] = ()
    polylines: tuple[Polyline, ...] = ()
    marks: tuple[Mark, ...] = ()
    labels: tuple[Label, ...] = ()
    #: What the chart shows, in words (its accessible name, and a test's handle).
    summary: str = ""
    notes: tuple[str, ...] = field(default=())


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _si(value: float, unit: str) -> str:
    for limit, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _count(value: float) -> str:
    """A count as the dashboard writes it (``82.8k``, ``1.2M``)."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.0f}"


def _pct(value: float) -> str:
    return f"{value:.3g}%" if value < 100 else f"{value:.0f}%"


# -- the roofline ------------------------------------------------------------------------------

_RW, _RH, _RL, _RR, _RT, _RB = 860, 290, 70, 190, 16, 40


@dataclass(frozen=True)
class _Roof:
    sol_ms: float
    flops: float | None
    min_bytes: float | None
    eager_ms: float | None
    compile_ms: float | None

    def throughput(self, pct: float) -> str:
        """What reaching ``pct`` % of the roof means, in GB/s of minimum traffic (else FLOP/s)."""
        seconds = self.sol_ms * 100.0 / pct / 1e3
        if self.min_bytes:
            return _si(self.min_bytes / seconds, "B/s")
        return _si((self.flops or 0.0) / seconds, "FLOP/s")


def _roof(attempts: Sequence[Attempt]) -> _Roof | None:
    for attempt in reversed(attempts):
        verdict = attempt.read_verdict()
        if verdict.sol_ms is None or verdict.sol_ms <= 0:
            continue
        eager_ms, compile_ms = verdict.baselines_ms
        return _Roof(sol_ms=verdict.sol_ms, flops=verdict.flops, min_bytes=verdict.min_bytes, eager_ms=eager_ms,
                     compile_ms=compile_ms)
    return None


def roofline_chart(attempts: Sequence[Attempt], *, job_id: int, best_n: int | None) -> Chart | None:
    """The timed attempts as a fraction of the speed of light; ``None`` before the referee knows the
    roofline (no timed attempt with ``sol_ms`` yet)."""
    roof = _roof(attempts)
    if roof is None:
        return None
    timed = [(a, 100.0 * roof.sol_ms / a.median_ms) for a in attempts if a.median_ms and a.median_ms > 0]
    baselines = [(name, css, 100.0 * roof.sol_ms / ms) for name, css, ms in (
        ("eager", "line-eager", roof.eager_ms), ("torch.compile", "line-compile", roof.compile_ms)) if ms]
    values = [p for _, p in timed] + [p for *_, p in baselines] + [100.0]
    lo = 10 ** math.floor(math.log10(min(values) / 1.2))
    hi = max(100.0, max(values)) * 1.25
    plot_w, plot_h = _RW - _RL - _RR, _RH - _RT - _RB
    last_n = max([a.n for a in attempts] + [1])

    def x(n: int) -> float:  # half an attempt of room on either side
        return round(_RL + plot_w * (n - 0.5) / last_n, 1)

    def y(pct: float) -> float:
        frac = (math.log10(pct) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        return round(_RT + plot_h * (1 - frac), 1)

    lines: list[Line] = []
    labels: list[Label] = []
    decades = range(round(math.log10(lo)), math.floor(math.log10(hi)) + 1)
    for exponent in decades:
        for factor in (1, 2, 5) if len(decades) <= 3 else (1,):
            pct = factor * 10.0 ** exponent
            if not lo <= pct <= hi:
                continue
            lines.append(Line(_RL, y(pct), _RW - _RR, y(pct), "grid"))
            labels.append(Label(_RL - 6, y(pct) + 4, _pct(pct), anchor="end"))
            labels.append(Label(_RW - _RR + 6, y(pct) + 4, roof.throughput(pct)))
    lines.append(Line(_RL, y(100.0), _RW - _RR, y(100.0), "roof"))
    labels.append(Label(_RL + 6, y(100.0) + 16, f"speed of light {fmt_ms(roof.sol_ms)} ms", "roof-label"))
    for name, css, pct in baselines:
        lines.append(Line(_RL, y(pct), _RW - _RR, y(pct), css))
        labels.append(Label(_RL + 6, y(pct) - 5, f"{name} {_pct(pct)}", f"{css}-label"))
    step = max(1, math.ceil(last_n / 12))
    for n in range(1, last_n + 1, step):
        labels.append(Label(x(n), _RH - _RB + 16, str(n), anchor="middle"))
    labels.append(Label(_RL + plot_w / 2, _RH - 4, "attempt", "axis", "middle"))
    labels.append(Label(16, _RT + plot_h / 2, "% of speed of light (log)", "axis", "middle", -90))
    axis_unit = "achieved GB/s of minimum traffic" if roof.min_bytes else "achieved FLOP/s"
    labels.append(Label(_RW - 12, _RT + plot_h / 2, axis_unit, "axis", "middle", -90))
    marks = []
    for attempt, pct in timed:
        achieved = [roof.throughput(pct)]
        if roof.min_bytes and roof.flops:
            achieved.append(_si(roof.flops / (attempt.median_ms or 1.0) * 1e3, "FLOP/s"))
        status = attempt.status.value
        marks.append(Mark(
            x(attempt.n), y(pct), f"pt status-{status}" + (" best" if attempt.n == best_n else ""),
            f"attempt {attempt.n} ({attempt.tool}, {status}): {fmt_ms(attempt.median_ms)} ms, {_pct(pct)} of the "
            f"speed of light ({', '.join(achieved)})", f"/dashboard/jobs/{job_id}/attempts/{attempt.n}",
            n=attempt.n))
    intensity = roof.flops / roof.min_bytes if roof.flops and roof.min_bytes else None
    notes = [f"speed of light {fmt_ms(roof.sol_ms)} ms"]
    if roof.flops is not None:
        notes.append(f"{_si(roof.flops, 'FLOP')}")
    if roof.min_bytes is not None:
        notes.append(f"{_si(roof.min_bytes, 'B')} minimum traffic")
    if intensity is not None:
        notes.append(f"arithmetic intensity {intensity:.3g} FLOP/B")
    return Chart(width=_RW, height=_RH, areas=((_RL, _RT, plot_w, plot_h),), lines=tuple(lines), marks=tuple(marks),
                 labels=tuple(labels), notes=tuple(notes),
                 summary=f"{len(timed)} timed attempts against a speed of light of {fmt_ms(roof.sol_ms)} ms")


# -- usage over time -----------------------------------------------------------------------------

_UW, _UH, _UL, _UR, _UT, _UB, _UGAP = 860, 300, 70, 150, 14, 44, 22
#: A budget is drawn when it is at most this many times what was used (else it is named only).
BUDGET_IN_VIEW = 4.0
#: The wall-clock budget is drawn when it is at most this many times the time elapsed (more
#: would squeeze the job into a corner of the chart).
WALL_IN_VIEW = 1.5
#: Steps of the time axis, in seconds.
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14_400, 28_800, 86_400)


def _nice(value: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``value``."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 5, 10) if value <= m * power)


def _clock(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {rest:02d} s" if rest else "")
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes:02d} min" if minutes else "")


def usage_chart(
    *, job_id: int, start: datetime, end: datetime, points: Sequence[UsagePoint], attempts: Sequence[Attempt],
    total_tokens: int, total_cost: float, max_tokens: float | None, max_cost_usd: float | None,
    wall_clock_s: float | None,
) -> Chart | None:
    """Cumulative tokens (top) and cost (bottom) against seconds since the job started; ``None``
    when no message used any and no attempt was judged yet."""
    if not points and not attempts:
        return None
    start = _utc(start)
    times = [(_utc(p.at) - start).total_seconds() for p in points]
    judged = [(_utc(a.created_at) - start).total_seconds() for a in attempts]
    elapsed = max([(_utc(end) - start).total_seconds(), *times, *judged, 1.0])
    x_max = elapsed * 1.02
    if wall_clock_s and wall_clock_s <= elapsed * WALL_IN_VIEW:
        x_max = max(x_max, wall_clock_s * 1.02)
    plot_w = _UW - _UL - _UR
    panel_h = (_UH - _UT - _UB - _UGAP) / 2

    def x(seconds: float) -> float:
        return round(_UL + plot_w * max(0.0, seconds) / x_max, 1)

    lines: list[Line] = []
    polylines: list[Polyline] = []
    labels: list[Label] = []
    series: tuple[tuple[str, list[float], float, float | None], ...] = (
        ("tokens", [float(p.tokens) for p in points], float(total_tokens), max_tokens),
        ("cost", [p.cost_usd for p in points], total_cost, max_cost_usd))
    for index, (name, amounts, total, limit) in enumerate(series):
        css = name
        top = _UT + index * (panel_h + _UGAP)
        cumulative = list(_running(amounts))
        recorded = cumulative[-1] if cumulative else 0.0
        shown = max(total, recorded)
        y_max = _nice(shown * 1.1) if shown > 0 else 1.0
        limit_value = finite(limit)
        if limit_value and limit_value > 0 and limit_value <= max(shown, 1e-12) * BUDGET_IN_VIEW:
            y_max = max(y_max, _nice(limit_value * 1.05))

        def y(value: float, top: float = top, y_max: float = y_max) -> float:
            return round(top + panel_h * (1 - value / y_max), 1)

        text = fmt_usd if name == "cost" else _count
        for fraction in (0.0, 0.5, 1.0):
            lines.append(Line(_UL, y(y_max * fraction), _UW - _UR, y(y_max * fraction), "grid"))
            labels.append(Label(_UL - 6, y(y_max * fraction) + 4, text(y_max * fraction), anchor="end"))
        labels.append(Label(16, top + panel_h / 2, name, "axis", "middle", -90))
        path, level = [f"{x(0)},{y(0)}"], y(0)
        for seconds, value in zip(times, cumulative, strict=True):  # a step: level, then up
            path += [f"{x(seconds)},{level}", f"{x(seconds)},{y(value)}"]
            level = y(value)
        path.append(f"{x(elapsed)},{level}")
        if total > recorded:  # usage of calls that failed or were cut: on the job's totals, no message
            path.append(f"{x(elapsed)},{y(total)}")
        polylines.append(Polyline(" ".join(path), f"usage usage-{css}"))
        labels.append(Label(_UW - _UR + 8, y(shown) + 4, f"{name} {text(shown)}", f"usage-label usage-{css}-label"))
        if limit_value and y_max >= limit_value:
            lines.append(Line(_UL, y(limit_value), _UW - _UR, y(limit_value), "budget"))
            labels.append(Label(_UW - _UR + 8, y(limit_value) + 4, f"budget {text(limit_value)}", "budget-label"))
        elif limit_value:
            labels.append(Label(_UW - _UR + 8, top + 10, f"budget {text(limit_value)}", "budget-label"))
    bottom = _UH - _UB
    if wall_clock_s and wall_clock_s <= x_max:
        lines.append(Line(x(wall_clock_s), _UT, x(wall_clock_s), bottom, "budget"))
        labels.append(Label(x(wall_clock_s) - 4, _UT + 10, f"wall clock budget {_clock(wall_clock_s)}",
                            "budget-label", "end"))
    elif wall_clock_s:
        labels.append(Label(_UW - _UR + 8, bottom - 4, f"wall budget {_clock(wall_clock_s)}", "budget-label"))
    step = next((s for s in _TIME_STEPS if x_max / s <= 7), _TIME_STEPS[-1])
    tick = 0.0
    while tick <= x_max:
        labels.append(Label(x(tick), bottom + 26, _clock(tick), anchor="middle"))
        tick += step
    labels.append(Label(_UL + plot_w / 2, _UH - 2, "wall clock since the job started", "axis", "middle"))
    marks = tuple(Mark(x(seconds), bottom + 8, f"tick status-{a.status.value}",
                       f"attempt {a.n} ({a.tool}, {a.status.value}) at {_clock(seconds)}",
                       f"/dashboard/jobs/{job_id}/attempts/{a.n}", shape="tick", n=a.n)
                  for a, seconds in zip(attempts, judged, strict=True))
    areas = tuple((_UL, _UT + i * (panel_h + _UGAP), plot_w, panel_h) for i in range(2))
    return Chart(width=_UW, height=_UH, areas=areas, lines=tuple(lines), polylines=tuple(polylines), marks=marks,
                 labels=tuple(labels),
                 summary=f"{_count(total_tokens)} tokens and {fmt_usd(total_cost)} over "
                         f"{_clock(elapsed)}, {len(attempts)} attempts")


def _running(values: Sequence[float]) -> list[float]:
    total, out = 0.0, []
    for value in values:
        total += value
        out.append(total)
    return out


# -- a job's -----------------------------------------------------------------------------------


def baselines_ms(attempts: Sequence[Attempt]) -> tuple[float | None, float | None]:
    """Eager PyTorch's and ``torch.compile``'s milliseconds, from the newest verdict that has them."""
    for attempt in reversed(attempts):
        eager, compiled = attempt.read_verdict().baselines_ms
        if eager is not None or compiled is not None:
            return eager, compiled
    return None, None


def compile_line(attempts: Sequence[Attempt]) -> float | None:
    """eager_ms / compile_ms: where torch.compile sits on a chart of speedups over eager."""
    for attempt in reversed(attempts):
        eager, compiled = attempt.read_verdict().baselines_ms
        if eager is not None and compiled is not None and compiled > 0:
            return eager / compiled
    return None


@dataclass(frozen=True)
class JobCharts:
    """The job page's analysis charts (each ``None`` until there is something to draw)."""

    roofline: Chart | None
    usage: Chart | None


def job_charts(job: Job, attempts: Sequence[Attempt], points: Sequence[UsagePoint], *, now: datetime) -> JobCharts:
    budgets = Reader(job.budgets or {}, f"job {job.id}'s budgets")
    best_n = job.best_attempt.n if job.best_attempt is not None else None
    start = job.started_at or job.created_at
    return JobCharts(
        roofline=roofline_chart(attempts, job_id=job.id, best_n=best_n),
        usage=usage_chart(
            job_id=job.id, start=start, end=job.finished_at or now, points=points, attempts=attempts,
            total_tokens=job.tokens_in + job.tokens_out, total_cost=job.cost_usd,
            max_tokens=budgets.optional_number("max_tokens"), max_cost_usd=budgets.optional_number("max_cost_usd"),
            wall_clock_s=budgets.optional_number("wall_clock_s")),
    )
