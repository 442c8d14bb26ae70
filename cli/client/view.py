"""The live view of a job, fed by its events: what ``watch`` and ``optimize`` show.

`JobView` takes the job's events as they come (``watch`` reads them from the API's stream,
``optimize`` from the embedded store) and renders, on a terminal, the attempts table with the
budgets under it, what the worker is doing now (the referee's stage and its elapsed time, the
steps done so far: header build and baseline timing on a cold cache) and the agent's last words;
elsewhere one plain line per event. `summary` says in words whether the best kernel beats eager
PyTorch and torch.compile, and where to look at it. Nothing here prints a payload as it came.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cli.client.columns import Cell, Column, rich_table, show_rows
from cli.client.ending import baseline_ms, verdict_sentence
from cli.client.output import job_problem_label, json_count, json_object, status_text
from display import finite, fmt_ms, fmt_pct, fmt_speedup, fmt_usd
from vocabulary.events import (
    AttemptPayload,
    CancelRequestedPayload,
    MessagePayload,
    ProgressPayload,
    StagePayload,
    StatePayload,
    TrajectoryPayload,
    parse_payload,
)
from vocabulary.figures import AttemptFigures
from vocabulary.stages import StagePhase
from vocabulary.verdict import ErrorKind
from vocabulary.wire import JsonObject, JsonValue

__all__ = ["STAGE_LABELS", "JobView", "attempt_status", "baseline_ms", "cut_at_word", "verdict_sentence"]

#: What each referee stage is, in words (the dashboard says the same).
STAGE_LABELS = {
    "header_build": "building the torch headers (once per cache)",
    "reference_start": "starting the reference (problem, expected outputs)",
    "baselines": "timing eager PyTorch and torch.compile (once per problem)",
    "compile": "compiling the candidate",
    "load": "loading the candidate",
    "correctness": "checking correctness",
    "timing": "timing the candidate",
}
#: Stages worth keeping in the list of steps once done: slow ones a cold cache pays for once.
_STEPS = ("header_build", "reference_start", "baselines")
_PROGRESS_LABELS = {
    "started": "the worker started the job",
    "evaluating": "evaluating the candidate",
    "infra_retry": "retrying after an infrastructure error",
    "retime": "re-timing a quarantined kernel with fresh seeds",
}
#: Characters of an agent message shown in a log line (cut at a word).
MESSAGE_CHARS = 160
_SPACE = re.compile(r"\s+")


def cut_at_word(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, cut at a word boundary with an ellipsis."""
    flat = _SPACE.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    room = max(1, limit - 1)
    cut = flat[:room]
    space = cut.rfind(" ")
    if space > room // 2:  # a word boundary not too far back; else a hard cut of a very long word
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"


def attempt_status(figures: AttemptFigures) -> str:
    """An attempt's status as shown: ``cancelled`` for an evaluation its job's stop cut short
    (stored as an error of kind ``cancelled``: not the candidate's failure)."""
    return "cancelled" if figures.error_kind is ErrorKind.CANCELLED else figures.status.value


def _seconds(value: object) -> str:
    v = finite(value)
    if v is None:
        return "—"
    return f"{v:.1f} s" if v < 100 else f"{v / 60:.1f} min"


def _parse_time(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.replace(tzinfo=moment.tzinfo or UTC).timestamp()


@dataclass
class _Step:
    stage: str
    started: float
    seconds: float | None = None


@dataclass
class JobView:
    """A job as its events describe it.

    Args:
        job: the job as the API returns it (``JobPublic``, with the budgets it runs under);
            refreshed by the caller now and then.
        clock: wall-clock seconds (a test seam).
    """

    job: JsonObject
    clock: Callable[[], float] = time.time
    #: Each attempt's ``attempt`` event, by its number.
    attempts: dict[int, AttemptPayload] = field(default_factory=dict)
    #: The stage running now and the slow steps done (header build, reference, baselines).
    steps: list[_Step] = field(default_factory=list)
    running: _Step | None = None
    #: Per trajectory index: assistant turns and tool calls so far, and its state.
    turns: dict[int, int] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)
    trajectories: dict[int, str] = field(default_factory=dict)
    #: Trajectory ids (the store's) to their 0-based index in the job, as the dashboard numbers them.
    trajectory_index: dict[int, int] = field(default_factory=dict)
    #: The baselines the speedups are ratios of (milliseconds), as the latest attempt gave them.
    eager_ms: float | None = None
    compile_ms: float | None = None
    last_words: str = ""
    note: str = ""

    # -- events ------------------------------------------------------------------------------
    def apply(self, event_type: str, data: JsonValue) -> str | None:
        """Take one event in (read through its typed payload, `vocabulary.events`); returns a line
        for a log (Rich markup), if it says anything. An event this version cannot read says nothing."""
        payload = parse_payload(event_type, data)
        match payload:
            case AttemptPayload():
                return self._on_attempt(payload)
            case StatePayload():
                return self._on_state(payload)
            case CancelRequestedPayload():
                return f"job {self.job['id']}: cancel requested"
            case StagePayload():
                return self._on_stage(payload)
            case ProgressPayload():
                return self._on_progress(payload)
            case TrajectoryPayload():
                return self._on_trajectory(payload)
            case MessagePayload():
                return self._on_message(payload)
        return None

    def _on_attempt(self, a: AttemptPayload) -> str | None:
        self.attempts[a.n] = a
        self.running = None
        self.note = "the agent is reading the verdict"
        baselines = self._baselines(a)
        best = "  [bold green]best[/]" if a.best else ""
        # Which trajectory, when the job has several: t0, t1 … as the dashboard names them.
        several = json_count(self.job.get("trajectories")) > 1 or len(self.trajectory_index) > 1
        trajectory = f"t{self.trajectory_label(a)}  " if several and a.trajectory_id is not None else ""
        return (
            f"attempt {a.n:>3}  {trajectory}{a.tool:<10} {attempt_status(a):<10} "
            f"{fmt_ms(a.median_ms):>9} ms  {fmt_speedup(a.speedup_vs_eager):>8} vs eager  "
            f"{fmt_speedup(a.speedup_vs_compile):>8} vs compile  {fmt_pct(a.pct_of_sol):>7} of SOL{best}"
            + (f"\n  baselines: eager PyTorch {fmt_ms(self.eager_ms)} ms, torch.compile {fmt_ms(self.compile_ms)} ms"
               if baselines else "")
        )

    def _baselines(self, a: AttemptPayload) -> bool:
        """Take the attempt's baselines in; whether they are new (first seen, or re-timed)."""
        if a.eager_ms is None or (a.eager_ms, a.compile_ms) == (self.eager_ms, self.compile_ms):
            return False
        self.eager_ms, self.compile_ms = a.eager_ms, a.compile_ms
        return True

    def trajectory_label(self, a: AttemptPayload) -> str:
        """The attempt's trajectory as the dashboard numbers it (0-based), ``—`` for none."""
        if a.trajectory_id is None:
            return "—"
        index = self.trajectory_index.get(a.trajectory_id)
        return "?" if index is None else str(index)

    def _on_state(self, data: StatePayload) -> str | None:
        self.job["state"] = data.state
        reason = data.error or data.reason
        if data.state in ("succeeded", "failed", "cancelled"):
            self.running = None
        return f"job {self.job['id']} is {data.state}" + (f": {escape(reason)}" if reason else "")

    def _on_stage(self, data: StagePayload) -> str | None:
        stage = data.stage.value
        label = STAGE_LABELS.get(stage, stage.replace("_", " "))
        at = _parse_time(data.at) or self.clock()
        if data.phase is StagePhase.STARTED:
            self.running = _Step(stage, at)
            return None  # the finished line says it, with its time
        seconds = finite(data.seconds)
        if self.running is not None and self.running.stage == stage:
            self.running = None
        if stage in _STEPS:
            self.steps.append(_Step(stage, at - (seconds or 0.0), seconds))
        return f"  {label}: {_seconds(seconds)}" if stage in _STEPS or (seconds or 0) >= 10 else None

    def _on_progress(self, data: ProgressPayload) -> str | None:
        phase = data.phase
        text = _PROGRESS_LABELS.get(phase, phase.replace("_", " "))
        message = data.details.get("message")
        if phase == "infra_retry" and message:
            text += f" ({cut_at_word(str(message), 120)})"
        self.note = text
        return escape(text)

    def _on_trajectory(self, data: TrajectoryPayload) -> str | None:
        index, state, reason = data.index, data.state, data.reason
        self.trajectories[index] = state
        self.trajectory_index[data.trajectory_id] = index
        strategy = f", strategy {data.strategy}" if data.strategy else ""
        if state == "running":
            return f"trajectory {index} started{escape(strategy)}"
        why = f" ({escape(str(reason))})" if reason and reason != state else ""
        return f"trajectory {index} {state}{why}"

    def _on_message(self, data: MessagePayload) -> str | None:
        if data.role != "assistant":
            return None  # tool results are the attempts' rows; the prompt is long and known
        index = data.trajectory
        self.turns[index] = self.turns.get(index, 0) + 1
        tools = list(data.tool_calls)
        self.calls[index] = self.calls.get(index, 0) + len(tools)
        words = cut_at_word(data.preview, MESSAGE_CHARS)
        self.last_words = words
        self.note = f"the agent called {', '.join(tools)}" if tools else "the agent is thinking"
        calls = f" → {', '.join(tools)}" if tools else ""
        return f"  [dim]agent:[/] {escape(words)}{calls}" if words else (f"  [dim]agent{calls}[/]" if calls else None)

    # -- rendering ---------------------------------------------------------------------------
    def _budget(self, name: str) -> JsonValue:
        return json_object(self.job.get("budgets")).get(name)

    def budget_line(self) -> str:
        job = self.job
        parts = []
        if self.turns:
            turns, calls = max(self.turns.values()), max(self.calls.values(), default=0)
            limit_turns, limit_calls = self._budget("turns"), self._budget("tool_calls")
            parts.append(f"turns {turns}" + (f" / {limit_turns}" if limit_turns else ""))
            parts.append(f"tool calls {calls}" + (f" / {limit_calls}" if limit_calls else ""))
        tokens = json_count(job.get("tokens_in")) + json_count(job.get("tokens_out"))
        max_tokens = json_count(self._budget("max_tokens"))
        parts.append(f"tokens {tokens:,}" + (f" / {max_tokens:,}" if max_tokens else ""))
        max_cost = self._budget("max_cost_usd")
        parts.append(f"cost {fmt_usd(job.get('cost_usd'))}" + (f" / {fmt_usd(max_cost)}" if max_cost is not None
                                                                else ""))
        started = _parse_time(job.get("started_at"))
        if started is not None:
            end = _parse_time(job.get("finished_at")) or self.clock()
            wall = finite(self._budget("wall_clock_s"))
            parts.append(f"wall {max(0.0, end - started):.0f} s" + (f" / {wall:.0f} s" if wall else ""))
        if job.get("target") == "cuda":
            parts.append(f"GPU {finite(job.get('gpu_seconds')) or 0:.1f} s")
        return " · ".join(parts)

    def title(self) -> str:
        job = self.job
        return f"job {job['id']} · {job_problem_label(job)} · {job.get('target')} · {job.get('state')}"

    def columns(self) -> list[Column]:
        # The ratios' bases beside them: eager PyTorch's and torch.compile's milliseconds.
        eager = f"vs eager\n{fmt_ms(self.eager_ms)} ms" if self.eager_ms is not None else "vs eager"
        compiled = f"vs compile\n{fmt_ms(self.compile_ms)} ms" if self.eager_ms is not None else "vs compile"
        # Never cut: what identifies an attempt and its figures. On a narrow terminal % SOL, then the
        # stage, then the trajectory make room (which is shown only when there are several).
        several = len(self.trajectory_index) > 1
        return [Column("#", "right", key=True), *([Column("traj", "right", key=True, drop=1)] if several else []),
                Column("tool", key=True), Column("status", key=True), Column("stage", key=True, drop=2),
                Column("median\nms", "right", key=True), Column(eager, "right", key=True),
                Column(compiled, "right", key=True), Column("% SOL", "right", key=True, drop=3)]

    def rows(self) -> list[list[Cell]]:
        best_n = json_object(self.job.get("best")).get("n")
        several = len(self.trajectory_index) > 1
        return [[f"{n}★" if best_n == n else str(n), *([self.trajectory_label(a)] if several else []), a.tool,
                 status_text(attempt_status(a)), a.stage.value, fmt_ms(a.median_ms), fmt_speedup(a.speedup_vs_eager),
                 fmt_speedup(a.speedup_vs_compile), fmt_pct(a.pct_of_sol)]
                for n, a in sorted(self.attempts.items())]

    def table(self, width: int | None = None) -> Table:
        """The attempts as a terminal's table (``width`` wide at most), the budgets under it."""
        return rich_table(self.columns(), self.rows(), title=self.title(), caption=self.budget_line(), width=width)

    def show(self, console: Console) -> None:
        """The attempts once, the budgets under them: a table on a terminal, plain columns elsewhere."""
        show_rows(console, self.columns(), self.rows(), title=self.title(), caption=self.budget_line())

    def now_lines(self, width: int = 120) -> list[Text]:
        """What the worker is doing now, and the slow steps done so far (a cold cache's); the agent's
        last words cut at a word to fit ``width``."""
        lines = [Text.assemble(("  ✓ ", "green"), STAGE_LABELS.get(s.stage, s.stage), f"  {_seconds(s.seconds)}")
                 for s in self.steps]
        if self.running is not None:
            elapsed = max(0.0, self.clock() - self.running.started)
            label = STAGE_LABELS.get(self.running.stage, self.running.stage.replace("_", " "))
            lines.append(Text.assemble(("now: ", "bold"), label, (f"  {_seconds(elapsed)} …", "cyan")))
        elif self.job.get("state") in ("queued", "running") and self.note:
            lines.append(Text.assemble(("now: ", "bold"), self.note))
        if self.last_words and self.job.get("state") == "running":
            lines.append(Text.assemble(("agent: ", "dim"), cut_at_word(self.last_words, max(20, width - 8))))
        return lines

    def render(self, width: int = 120) -> RenderableType:
        return Group(self.table(width), *self.now_lines(width))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # A `rich.live.Live` redraws it (elapsed times move on), cut to the terminal's width.
        yield self.render(options.max_width)

    def summary(self, *, dashboard_url: str | None = None, replay_hint: str | None = None) -> list[str]:
        """The closing lines (Rich markup): the verdict in words, then where to see the kernel."""
        job = self.job
        lines = []
        best = json_object(job.get("best"))
        if job.get("error"):
            lines.append(f"[red]error:[/] {escape(str(job['error']))}")
        if best:
            lines.append(f"best: attempt {best.get('n')}, {fmt_ms(best.get('median_ms'))} ms, "
                         f"{fmt_speedup(best.get('speedup_vs_eager'))} vs eager "
                         f"({fmt_ms(baseline_ms(best, 'eager'))} ms), "
                         f"{fmt_speedup(best.get('speedup_vs_compile'))} vs torch.compile "
                         f"({fmt_ms(baseline_ms(best, 'compile'))} ms)")
        style, sentence = verdict_sentence(best)
        lines.append(f"[{style}]{escape(sentence)}[/]")
        if best and replay_hint:
            lines.append(f"Re-run it here, figures side by side: `{escape(replay_hint)}`")
        if dashboard_url:
            lines.append(f"{'Its attempts, sources and diffs' if best else 'What the agent tried'}: "
                         f"{escape(dashboard_url)}")
        return lines
