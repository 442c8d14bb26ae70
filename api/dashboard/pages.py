"""HTML of the dashboard's pages: Jinja2 templates (``templates/``) with autoescape on.

Every value from a row, a verdict or a source reaches the HTML through a template's ``{{ … }}``,
escaped by Jinja2; the only markup made in Python is Pygments' highlighting (`highlight`, which
escapes what it wraps). Numbers are formatted by the filters below the way
``static/dashboard.js`` formats what it adds live, so a page and its updates look alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from api.dashboard.charts import JobCharts
from api.dashboard.highlight import highlight
from api.dashboard.problem_facts import ProblemFacts
from api.dashboard.views import (
    AttemptView,
    EventView,
    TimelineEntry,
    TrajectoryView,
    work_figures,
)
from api.schemas import AttemptPublic, BestSummary, JobPublic
from display import finite, fmt_ms, fmt_pct, fmt_speedup, fmt_usd, problem_label
from display.timings import TimeToVerdict
from display.timings import fmt_seconds as fmt_stage_seconds
from store import JobProblem, JobState, ProblemJobWork, Target
from vocabulary.stages import LANE_STAGES
from vocabulary.wire import JsonObject

__all__ = [
    "BudgetBar",
    "Chrome",
    "JobFilters",
    "LocalKeyHint",
    "attempt_page",
    "job_page",
    "jobs_page",
    "login_page",
    "message_page",
    "problem_page",
    "render",
]

TEMPLATES = Path(__file__).parent / "templates"
_LIVE_STATES = (JobState.QUEUED, JobState.RUNNING)


# -- numbers (mirrored in dashboard.js) ----------------------------------------------------------
# `display` has the formats the CLI shares (ms, speedup, %, $); these are the dashboard's own.


def fmt_count(value: object) -> str:
    v = finite(value)
    if v is None:
        return "—"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= limit:
            return f"{v / limit:.3g}{suffix}"
    return f"{v:.0f}"


def fmt_seconds(value: object) -> str:
    v = finite(value)
    if v is None:
        return "—"
    if v < 60:
        return f"{v:.1f} s"
    minutes, seconds = divmod(round(v), 60)
    return f"{minutes} min {seconds:02d} s"


def fmt_err(value: object) -> str:
    v = finite(value)
    return "—" if v is None else f"{v:.3g}"


def fmt_time(value: datetime | str | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_minute(value: datetime | str | None) -> str:
    """A date and time to the minute, UTC (a table column: the zone is in its heading)."""
    return fmt_time(value)[:16]


def fmt_clock(value: datetime) -> str:
    """The time of day (UTC) of an event within a job."""
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value.strftime("%H:%M:%S")


# -- the environment -----------------------------------------------------------------------------


@cache
def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(enabled_extensions=("html",), default_for_string=True),
        undefined=StrictUndefined,  # a misspelt name in a template is an error, not an empty cell
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ms=fmt_ms, speedup=fmt_speedup, pct=fmt_pct, count=fmt_count, usd=fmt_usd, seconds=fmt_seconds,
        err=fmt_err, time=fmt_time, minute=fmt_minute, clock=fmt_clock, highlight=highlight,
        stage_s=fmt_stage_seconds,
    )
    env.globals["lane_stages"] = LANE_STAGES
    return env


def render(template: str, /, **context: Any) -> str:
    """A template with this context (every page's ``chrome``: `Chrome`)."""
    return _environment().get_template(template).render(**context)


@dataclass(frozen=True)
class Chrome:
    """What every signed-in page's header needs."""

    owner: str | None = None
    csrf: str = ""


@dataclass(frozen=True)
class LocalKeyHint:
    """Where the local key of `kernelloop up` is, for the sign-in page shown on its machine."""

    path: str
    #: The key is the service's owner (an admin: the data directory holds the database).
    sees_every_job: bool


def login_page(*, login_csrf: str, next_path: str, error: str | None = None,
               local_key: LocalKeyHint | None = None) -> str:
    return render("login.html", title="Sign in", chrome=Chrome(), login_csrf=login_csrf, next_path=next_path,
                   error=error, local_key=local_key)


def model_page(*, run: Any, bars: Any, outcomes: Any, owner: str, csrf: str) -> str:
    """A model run (`api.dashboard.modelpage` computes its bars and outcomes)."""
    return render("model.html", title=f"Model run {run.id}", chrome=Chrome(owner, csrf), run=run,
                   report=run.report, bars=bars, outcomes=outcomes)


def message_page(*, heading: str, text: str, owner: str | None = None, csrf: str = "") -> str:
    return render("message.html", title=heading, chrome=Chrome(owner, csrf), heading=heading, text=text)


# -- jobs ------------------------------------------------------------------------------------------


def problem_name(job: JobPublic) -> str:
    return problem_label(job.problem.bundled_id, job.problem.sha256)


@dataclass(frozen=True)
class JobFilters:
    """The jobs list's filters, as the query string carries them."""

    state: JobState | None = None
    target: Target | None = None
    problem: str | None = None

    def query(self, **changes: Any) -> str:
        """The query string of these filters with ``changes`` (``None`` drops a filter), or ``""``."""
        values = {"state": self.state, "target": self.target, "problem": self.problem, **changes}
        pairs = {k: str(getattr(v, "value", v)) for k, v in values.items() if v not in (None, "")}
        return "?" + urlencode(pairs) if pairs else ""

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.state, self.target, self.problem))


def jobs_page(
    *,
    jobs: Sequence[JobPublic],
    owner: str,
    csrf: str,
    filters: JobFilters,
    problems: Sequence[JobProblem],
    next_offset: int | None,
    total: int | None,
) -> str:
    """The jobs list with its filters (state, target, problem)."""
    problem_choices = [(p.bundled_id or p.sha256, problem_label(p.bundled_id, p.sha256)) for p in problems]
    if filters.problem and filters.problem not in {value for value, _ in problem_choices}:
        problem_choices.append((filters.problem, filters.problem))
    return render(
        "jobs.html", title="Jobs", chrome=Chrome(owner, csrf), jobs=jobs, filters=filters,
        states=[s.value for s in JobState], targets=[t.value for t in Target], problem_choices=problem_choices,
        next_query=filters.query(offset=next_offset) if next_offset is not None else None, total=total,
        problem_name=problem_name,
    )


# -- one job ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetBar:
    """One of a job page's budget bars: how much of a limit is used (``width``: percent)."""

    id: str
    label: str
    text: str
    width: float


def _budgets(job: JobPublic, elapsed_s: float | None) -> list[BudgetBar]:
    budgets = job.budgets or {}
    tokens = job.tokens_in + job.tokens_out
    max_tokens, max_cost, wall = budgets.get("max_tokens"), budgets.get("max_cost_usd"), budgets.get("wall_clock_s")

    def bar(ident: str, label: str, used: float, limit: object, text: str) -> BudgetBar:
        limit_f = finite(limit)
        width = min(100.0, 100.0 * used / limit_f) if limit_f and limit_f > 0 else 0.0
        return BudgetBar(id=ident, label=label, text=text if limit_f else f"{text} (no limit)", width=width)

    bars = [
        bar("tokens", "tokens", tokens, max_tokens,
            f"{fmt_count(tokens)} of {fmt_count(max_tokens)}" if max_tokens else fmt_count(tokens)),
        bar("cost", "cost", job.cost_usd, max_cost,
            f"{fmt_usd(job.cost_usd)} of {fmt_usd(max_cost)}" if max_cost else fmt_usd(job.cost_usd)),
    ]
    if elapsed_s is not None:
        bars.append(bar("wall", "wall clock", elapsed_s, wall,
                        f"{elapsed_s:.0f} s of {wall:.0f} s" if wall else f"{elapsed_s:.0f} s"))
    return bars


def best_label(best: BestSummary | None) -> str:
    if not best:
        return "none verified yet"
    return f"attempt {best.n} · {fmt_ms(best.median_ms)} ms · {fmt_speedup(best.speedup_vs_eager)}"


def _attempt_json(a: AttemptPublic) -> JsonObject:
    """What the page's script needs of an attempt (the table's columns; the chart's mark, series)."""
    return a.model_dump(mode="json", include={
        "n", "trajectory_id", "tool", "status", "stage", "median_ms", "speedup_vs_eager", "speedup_vs_compile",
        "pct_of_sol", "message",
    })


def job_page(
    *,
    job: JobPublic,
    attempts: Sequence[AttemptPublic],
    trajectories: Sequence[TrajectoryView],
    timeline: Sequence[TimelineEntry],
    recent_events: Sequence[EventView],
    best_source: str | None,
    last_event_id: int,
    compile_line: float | None,
    elapsed_s: float | None,
    charts: JobCharts,
    timings: TimeToVerdict,
    baselines: tuple[float | None, float | None],
    owner: str,
    csrf: str,
    now: datetime,
) -> str:
    """The live job page: attempts, charts, messages timeline, what runs now, the best kernel."""
    best = job.best
    data: JsonObject = {
        "job_id": job.id,
        "state": job.state.value,
        "last_event_id": last_event_id,
        "best_n": best.n if best else None,
        "compile_line": compile_line,
        "attempts": [_attempt_json(a) for a in attempts],
        "trajectories": [t.to_json() for t in trajectories],
        "recent_events": [e.to_json() for e in recent_events],
        "server_now": now.isoformat(),
    }
    return render(
        "job.html", title=f"Job {job.id}", chrome=Chrome(owner, csrf), job=job, attempts=attempts,
        trajectories={t.id: t for t in trajectories}, timeline=timeline, live=job.state in _LIVE_STATES,
        budgets=_budgets(job, elapsed_s), best=best, best_label=best_label(best), best_source=best_source,
        problem_name=problem_name(job), data=data, charts=charts, timings=timings, baselines=baselines,
        scripts=("dashboard.js",),
    )


def attempt_page(*, job: JobPublic, attempt: AttemptView, owner: str, csrf: str) -> str:
    """One attempt: figures, compiler errors, trials, timing samples, provenance, source and diffs."""
    return render(
        "attempt.html", title=f"Job {job.id} · attempt {attempt.n}", chrome=Chrome(owner, csrf), job=job,
        attempt=attempt, verdict=attempt.verdict, problem_name=problem_name(job),
    )


# -- problems --------------------------------------------------------------------------------------


def _shape(shape: Sequence[int] | None) -> str:
    return "—" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def problem_page(
    *,
    name: str,
    description: str,
    source: str,
    mode: str,
    policy: str,
    atol: float | None,
    rtol: float | None,
    sha256: str,
    facts: ProblemFacts,
    jobs: Sequence[ProblemJobWork],
    owner: str,
    csrf: str,
) -> str:
    """A problem: its declarations, sizes and source, and what its visible ``jobs`` (newest first) measured."""
    names = sorted(set(facts.constants) | set(facts.cpu_constants))
    sizes = [
        (n, facts.constants.get(n, "—"), facts.cpu_constants.get(n, "—"),
         facts.cpu_constants.get(n) != facts.constants.get(n))
        for n in names
    ]
    tolerance = "per dtype" if atol is None and rtol is None else f"atol {atol} · rtol {rtol}"
    return render(
        "problem.html", title=name, chrome=Chrome(owner, csrf), name=name, description=description, source=source,
        mode=mode, policy=policy, tolerance=tolerance, sha=sha256[:16] + "…", facts=facts, shape=_shape,
        work=work_figures(jobs), sizes=sizes, job_ids=[j.job_id for j in jobs[:8]],
    )
