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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cli.client.output import job_problem_label, json_count, json_items, json_object, status_text
from display import finite, fmt_ms, fmt_pct, fmt_speedup, fmt_usd
from harness.wire import JsonObject, JsonValue

__all__ = ["STAGE_LABELS", "JobView", "cut_at_word", "verdict_sentence"]

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


def verdict_sentence(best: Mapping[str, JsonValue] | None) -> tuple[str, str]:
    """(style, sentence): whether the best kernel beats eager PyTorch and torch.compile, plainly."""
    if not best:
        return "yellow", "No verified kernel: no attempt was both correct and timed."
    eager, compiled = finite(best.get("speedup_vs_eager")), finite(best.get("speedup_vs_compile"))
    if eager is None:
        return "yellow", "It is correct; eager PyTorch was not timed, so there is no speedup to state."
    eager_text = (f"{eager:.2f}× faster than eager PyTorch" if eager >= 1
                  else f"slower than eager PyTorch ({eager:.2f}×)")
    if compiled is None:
        compile_text, beats_compile = "torch.compile was not timed", None
    elif compiled >= 1:
        compile_text, beats_compile = f"{compiled:.2f}× faster than torch.compile", True
    else:
        compile_text, beats_compile = f"slower than torch.compile ({compiled:.2f}×)", False
    style = "green" if eager >= 1 and beats_compile is not False else "yellow"
    verdict = "It beats eager PyTorch" if eager >= 1 else "It does not beat eager PyTorch"
    if beats_compile is True:
        verdict += " and torch.compile" if eager >= 1 else ", but it beats torch.compile"
    elif beats_compile is False:
        verdict += " but not torch.compile" if eager >= 1 else " nor torch.compile"
    return style, f"{verdict}: {eager_text}; {compile_text}."


@dataclass
class _Step:
    stage: str
    started: float
    seconds: float | None = None


@dataclass
class JobView:
    """A job as its events describe it.

    Args:
        job: the job as the API returns it (``JobPublic``); refreshed by the caller now and then.
        budget_defaults: the server's budgets, shown where the job names none.
        clock: wall-clock seconds (a test seam).
    """

    job: JsonObject
    budget_defaults: JsonObject = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    #: Each attempt's ``attempt`` events merged, by its number.
    attempts: dict[int, JsonObject] = field(default_factory=dict)
    #: The stage running now and the slow steps done (header build, reference, baselines).
    steps: list[_Step] = field(default_factory=list)
    running: _Step | None = None
    #: Per trajectory index: assistant turns and tool calls so far, and its state.
    turns: dict[int, int] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)
    trajectories: dict[int, str] = field(default_factory=dict)
    last_words: str = ""
    note: str = ""

    # -- events ------------------------------------------------------------------------------
    def apply(self, event_type: str, data: JsonValue) -> str | None:
        """Take one event in; returns a line for a log (Rich markup), if it says anything."""
        if not isinstance(data, dict):
            return None
        handler = getattr(self, f"_on_{event_type}", None)
        return handler(data) if handler is not None else None

    def _on_attempt(self, a: JsonObject) -> str | None:
        n = a.get("n")
        if not isinstance(n, int):
            return None
        self.attempts[n] = {**self.attempts.get(n, {}), **a}
        self.running = None
        self.note = "the agent is reading the verdict"
        best = "  [bold green]best[/]" if a.get("best") else ""
        return (
            f"attempt {n:>3}  {a.get('tool', ''):<10} {a.get('status', ''):<10} "
            f"{fmt_ms(a.get('median_ms')):>9} ms  {fmt_speedup(a.get('speedup_vs_eager')):>8} vs eager  "
            f"{fmt_speedup(a.get('speedup_vs_compile')):>8} vs compile  {fmt_pct(a.get('pct_of_sol')):>7} of SOL{best}"
        )

    def _on_state(self, data: JsonObject) -> str | None:
        self.job["state"] = data.get("state", self.job.get("state"))
        reason = data.get("error") or data.get("reason")
        if self.job["state"] in ("succeeded", "failed", "cancelled"):
            self.running = None
        return f"job {self.job['id']} is {self.job['state']}" + (f": {escape(str(reason))}" if reason else "")

    def _on_cancel_requested(self, _data: JsonObject) -> str | None:
        return f"job {self.job['id']}: cancel requested"

    def _on_stage(self, data: JsonObject) -> str | None:
        stage = str(data.get("stage") or "?")
        label = STAGE_LABELS.get(stage, stage.replace("_", " "))
        at = _parse_time(data.get("at")) or self.clock()
        if data.get("phase") == "started":
            self.running = _Step(stage, at)
            return None  # the finished line says it, with its time
        seconds = finite(data.get("seconds"))
        if self.running is not None and self.running.stage == stage:
            self.running = None
        if stage in _STEPS:
            self.steps.append(_Step(stage, at - (seconds or 0.0), seconds))
        return f"  {label}: {_seconds(seconds)}" if stage in _STEPS or (seconds or 0) >= 10 else None

    def _on_progress(self, data: JsonObject) -> str | None:
        phase = str(data.get("phase") or "")
        text = _PROGRESS_LABELS.get(phase, phase.replace("_", " "))
        if phase == "infra_retry" and data.get("message"):
            text += f" ({cut_at_word(str(data['message']), 120)})"
        self.note = text
        return escape(text)

    def _on_trajectory(self, data: JsonObject) -> str | None:
        index = json_count(data.get("index"))
        state = str(data.get("state") or "")
        self.trajectories[index] = state
        reason = data.get("reason")
        strategy = f", strategy {data['strategy']}" if data.get("strategy") else ""
        if state == "running":
            return f"trajectory {index} started{escape(strategy)}"
        why = f" ({escape(str(reason))})" if reason and reason != state else ""
        return f"trajectory {index} {state}{why}"

    def _on_message(self, data: JsonObject) -> str | None:
        if data.get("role") != "assistant":
            return None  # tool results are the attempts' rows; the prompt is long and known
        index = json_count(data.get("trajectory"))
        self.turns[index] = self.turns.get(index, 0) + 1
        tools = [str(t) for t in json_items(data.get("tool_calls"))]
        self.calls[index] = self.calls.get(index, 0) + len(tools)
        words = cut_at_word(str(data.get("preview") or ""), MESSAGE_CHARS)
        self.last_words = words
        self.note = f"the agent called {', '.join(tools)}" if tools else "the agent is thinking"
        calls = f" → {', '.join(tools)}" if tools else ""
        return f"  [dim]agent:[/] {escape(words)}{calls}" if words else (f"  [dim]agent{calls}[/]" if calls else None)

    # -- rendering ---------------------------------------------------------------------------
    def _budget(self, name: str) -> JsonValue:
        value = json_object(self.job.get("budgets")).get(name)
        return value if value is not None else self.budget_defaults.get(name)

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

    def table(self) -> Table:
        job = self.job
        best = json_object(job.get("best"))
        table = Table(
            title=f"job {job['id']} · {job_problem_label(job)} · {job.get('target')} · {job.get('state')}",
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
                fmt_speedup(a.get("speedup_vs_eager")), fmt_speedup(a.get("speedup_vs_compile")),
                fmt_pct(a.get("pct_of_sol")),
            )
        return table

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
        return Group(self.table(), *self.now_lines(width))

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
                         f"{fmt_speedup(best.get('speedup_vs_eager'))} vs eager, "
                         f"{fmt_speedup(best.get('speedup_vs_compile'))} vs torch.compile")
        style, sentence = verdict_sentence(best)
        lines.append(f"[{style}]{escape(sentence)}[/]")
        if best and replay_hint:
            lines.append(f"Re-run it here, figures side by side: `{escape(replay_hint)}`")
        if dashboard_url:
            lines.append(f"{'Its attempts, sources and diffs' if best else 'What the agent tried'}: "
                         f"{escape(dashboard_url)}")
        return lines
