"""The agent loop: trajectories of LLM turns and tool calls, under budgets, best-of across them.

`run_job` starts ``spec.trajectories`` independent chats (threads: their LLM calls and compiles
overlap; the evaluator serialises what must not), each with its own temperature and strategy hint,
and returns the fastest verified attempt of all. Every message is handed to the `Recorder` as it
happens. Per trajectory it enforces turns and tool calls; per job tokens, cost and wall clock; it
stops early at the target speedup. Every budget is shown to the model as it shrinks.

A job's stop (wall clock, cancel, a budget, the target) is enforced *during* a step, not only
between steps: the LLM call in flight polls it between stream chunks and is cut, and a monitor
thread cancels the evaluator so an evaluation in flight ends within seconds; the best attempt so
far is kept. A job that ends without a verified kernel says why (`agent.job.Failure`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agent.history import History, HistoryTooLong, SummaryFacts
from agent.job import CandidateRecord, Failure, JobResult, JobSpec, StopReason, Totals, TrajectoryResult
from agent.prompt import problem_message, system_prompt
from agent.protocols import Evaluator, Recorder
from agent.providers import make_provider
from agent.providers.base import (
    AssistantTurn,
    ContextOverflow,
    Interrupted,
    LLMProvider,
    Message,
    ProviderError,
    Usage,
    message_calls,
    text_field,
)
from agent.serial import SerialEvaluator
from agent.tools import Ledger, ToolExecutor, source_sha256, tool_schemas
from harness.evaluate import Referee
from vocabulary.budgets import Budgets
from vocabulary.devices import DeviceSpecs
from vocabulary.verdict import Verdict

__all__ = ["MONITOR_INTERVAL_S", "STRATEGIES", "TEMPERATURES", "run_job", "trajectory_plan"]

log = logging.getLogger(__name__)

#: After consecutive infra failures a trajectory gives up (each one is retried already).
MAX_CONSECUTIVE_INFRA = 3
#: How often the job's stop conditions are checked while a step runs (to cancel the evaluator).
MONITOR_INTERVAL_S = 0.5
#: Output tokens reserved for a reply when the profile sends no limit.
DEFAULT_REPLY_RESERVE = 4096
#: Strategy hints, one per trajectory in turn: (name, text for the system prompt).
STRATEGIES: tuple[tuple[str, str | None], ...] = (
    ("balanced", None),
    ("vendor_plus_epilogue", "Keep the vendor library for the heavy op (convolution or matmul through torch) and "
     "put everything after it into one fused, memory-bound pass of your own."),
    ("fuse_everything", "Fuse everything into as few custom kernels as possible, the heavy op included when that "
     "removes an intermediate tensor; benchmark it against the vendor-plus-epilogue version."),
    ("rewrite_first", "Start from exact algebraic rewrites (monotone ops around pooling, folded affine chains and "
     "normalisations) and write the simplest kernel they allow; then optimise its memory access."),
)
#: Sampling temperatures, one per trajectory in turn (the first is the most deliberate).
TEMPERATURES: tuple[float, ...] = (0.2, 0.7, 0.9, 0.5)

#: A reply that carries a candidate file: a python fence with the class the contract asks for.
_CODE_IN_TEXT = re.compile(r"```(?:python|py)[ \t]*\n.*?\bclass\s+ModelNew\b", re.DOTALL)
_TEXT_PROTOCOL = ("put the complete file in a ```python block and end your message with a ```json block naming "
                  'the tool, e.g. ```json\n{"tool": "benchmark", "arguments": {}}\n``` (tools: compile, '
                  "check_correctness, benchmark, profile, submit, get_gpu_specs)")


def trajectory_plan(count: int) -> list[tuple[float, str, str | None]]:
    """(temperature, strategy name, strategy text) for each of ``count`` trajectories."""
    return [(TEMPERATURES[i % len(TEMPERATURES)], *STRATEGIES[i % len(STRATEGIES)]) for i in range(count)]


class _SerialRecorder:
    """Serialises calls into a recorder that trajectories share."""

    def __init__(self, inner: Recorder) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return method(*args, **kwargs)

        return call


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


class _JobState:
    """What trajectories share: usage totals, the stop signal, the clock."""

    def __init__(self, budgets: Budgets, recorder: Any, clock: Callable[[], float]) -> None:
        self.budgets = budgets
        self.recorder = recorder
        self.clock = clock
        self.started = clock()
        self.lock = threading.Lock()
        self.usage = Usage()
        self.llm_calls = 0
        self.tool_calls = 0
        self.stop_reason: StopReason | None = None
        self._done = threading.Event()

    def stop(self, reason: StopReason) -> None:
        with self.lock:
            if self.stop_reason is None:
                self.stop_reason = reason

    def check(self) -> StopReason | None:
        """Why the job must stop now, if it must (checked at every safe point and while steps run)."""
        if self.stop_reason is None:
            if self.recorder.cancelled():
                self.stop(StopReason.CANCELLED)
            elif self.clock() - self.started >= self.budgets.wall_clock_s:
                self.stop(StopReason.WALL_CLOCK)
            elif self.usage.tokens_in + self.usage.tokens_out >= self.budgets.max_tokens:
                self.stop(StopReason.TOKENS)
            elif self.usage.cost_usd > 0 and self.usage.cost_usd >= self.budgets.max_cost_usd:
                self.stop(StopReason.COST)
        return self.stop_reason

    def stopping(self) -> bool:
        return self.check() is not None

    def add_usage(self, usage: Usage, *, call: bool) -> None:
        with self.lock:
            self.usage = self.usage + usage
            self.llm_calls += 1 if call else 0

    def add_tool_call(self) -> None:
        with self.lock:
            self.tool_calls += 1

    def observe(self, verdict: Verdict | None) -> None:
        target = self.budgets.target_speedup
        if target is not None and verdict is not None and verdict.is_verified:
            speedup = verdict.speedup_vs_eager
            if speedup is not None and speedup >= target:
                self.stop(StopReason.TARGET_REACHED)

    def budget_left(self) -> str:
        """The job-wide budgets left, for the model."""
        with self.lock:
            used = self.usage
        parts = [f"{max(0, self.budgets.max_tokens - used.tokens_in - used.tokens_out):,} tokens"]
        if self.budgets.max_cost_usd > 0:
            parts.append(f"${max(0.0, self.budgets.max_cost_usd - used.cost_usd):.2f}")
        parts.append(f"{_duration(self.budgets.wall_clock_s - (self.clock() - self.started))} of wall clock")
        return ", ".join(parts)

    # -- enforcement during a step -----------------------------------------------------------
    def monitor(self, evaluator: Evaluator) -> threading.Thread:
        """Watch the stop conditions while the job runs; on a stop, cancel the evaluator (once)."""

        def watch() -> None:
            while not self._done.wait(MONITOR_INTERVAL_S):
                if self.check() is None:
                    continue
                cancel = getattr(evaluator, "cancel", None)
                if cancel is None:  # an evaluator from before cancel() was part of the protocol
                    log.warning("the evaluator cannot be cancelled; the evaluation in flight runs to its end")
                    return
                try:
                    cancel()
                except Exception:
                    log.exception("cancelling the evaluator failed")
                return

        thread = threading.Thread(target=watch, name="job-monitor", daemon=True)
        thread.start()
        return thread

    def finish(self) -> None:
        self._done.set()


class _Stop(Exception):
    def __init__(self, reason: StopReason, error: str | None = None) -> None:
        self.reason = reason
        self.error = error
        super().__init__(reason.value)


class _Trajectory:
    """One chat: the opening, then turns until a budget, submit, or the job stops."""

    def __init__(self, *, index: int, temperature: float, strategy: str, strategy_text: str | None, spec: JobSpec,
                 job: _JobState, executor: ToolExecutor, provider: LLMProvider, recorder: Any,
                 specs: DeviceSpecs | None) -> None:
        self.index = index
        self.temperature = temperature
        self.strategy = strategy
        self.strategy_text = strategy_text
        self.spec = spec
        self.budgets = spec.budgets
        self.job = job
        self.executor = executor
        self.provider = provider
        self.recorder = recorder
        self.specs = specs
        self.tools = tool_schemas()
        self.ledger = Ledger()
        profile = spec.llm
        window = getattr(profile, "context_window", None) or 32_768
        if spec.context_tokens is not None:
            window = min(window, spec.context_tokens)
        reserve = getattr(profile, "max_output_tokens", None) or DEFAULT_REPLY_RESERVE
        self.history = History(window=window, reserve=reserve, tools=self.tools)
        mode = str(getattr(getattr(profile, "text_tool_calls", None), "value", "never"))
        self.auto_text = mode == "auto"
        self.text_mode = mode == "always" or bool(getattr(provider, "tools_refused", False))
        self.pass_back_reasoning = str(getattr(getattr(profile, "reasoning_history", None), "value", "")) == "pass_back"
        self.turns = 0
        self.tool_calls = 0
        self.infra_streak = 0
        self.refusals: list[str] = []
        self.silent_turns = 0
        #: Code-running calls that reached the evaluator (those cut by the job's stop included).
        self.attempted = 0

    # -- messages ----------------------------------------------------------------------------
    def _record(self, message: Message, turn: AssistantTurn | None = None) -> None:
        self.history.append(message)
        usage = turn.usage if turn else Usage()
        calls = message_calls(message)
        self.recorder.message(
            trajectory_index=self.index, role=text_field(message, "role") or "", content=text_field(message, "content"),
            tool_calls=[dict(c) for c in calls] if "tool_calls" in message else None,
            tool_call_id=text_field(message, "tool_call_id"),
            tokens_in=usage.tokens_in, tokens_out=usage.tokens_out,
            latency_ms=turn.latency_ms if turn else 0.0, cost_usd=usage.cost_usd,
            tokens_reasoning=usage.tokens_reasoning, tokens_cached=usage.tokens_cached,
        )

    def _record_usage(self, usage: Usage) -> None:
        """Usage of calls that produced no message: counted, recorded apart."""
        if usage.empty:
            return
        self.job.add_usage(usage, call=False)
        self.recorder.usage(trajectory_index=self.index, tokens_in=usage.tokens_in, tokens_out=usage.tokens_out,
                            cost_usd=usage.cost_usd, tokens_reasoning=usage.tokens_reasoning,
                            tokens_cached=usage.tokens_cached)

    def _facts(self) -> SummaryFacts:
        best = self.ledger.best
        best_line = None
        if best:
            best_line = (f"{best.tool} of source {best.source_sha256[:8]}: {best.median_ms or 0:.4g} ms, "
                         f"{best.verdict.speedup_vs_eager or 0:.2f}x vs eager")
        latest = self.ledger.latest_source
        return SummaryFacts(notes=tuple(self.ledger.notes), best_source=best.source if best else None,
                            best_line=best_line, latest_source=latest,
                            latest_sha256=source_sha256(latest) if latest else None)

    def _compact(self, *, target: float | None = None, server_said: str | None = None) -> None:
        try:
            summary = (self.history.compact(self._facts()) if target is None
                       else self.history.compact(self._facts(), target=target))
        except HistoryTooLong as exc:
            said = f"; the server said: {server_said}" if server_said else ""
            raise _Stop(StopReason.CONTEXT_OVERFLOW, f"the conversation does not fit the model's context window "
                        f"({self.history.window} tokens): {exc}{said}") from None
        # The summary is what the model reads in place of the older turns: store it like a message.
        self.recorder.message(trajectory_index=self.index, role="user", content=summary, tool_calls=None,
                              tool_call_id=None, tokens_in=0, tokens_out=0, latency_ms=0.0, cost_usd=0.0)
        log.info("trajectory %d: history compacted (%d so far)", self.index, self.history.compactions)

    def _budget_line(self) -> str:
        turns_left = self.budgets.turns - self.turns
        calls_left = self.budgets.tool_calls - self.tool_calls
        if turns_left <= 0 or calls_left <= 0:
            return "[budget used up: the session ends here; your fastest benchmarked correct candidate counts]"
        line = f"[budget left: {turns_left} turns, {calls_left} tool calls, {self.job.budget_left()}]"
        if turns_left == 1 or calls_left == 1:
            line += " Your next turn is the last: submit(source) your fastest correct candidate."
        return line

    # -- one LLM call ------------------------------------------------------------------------
    def _complete(self) -> AssistantTurn:
        if not self.history.fits():
            self._compact()
        for attempt in range(2):
            raw = self.history.raw_estimate()
            try:
                turn = self.provider.complete(self.history.messages, self.tools, temperature=self.temperature,
                                              text_tools=self.text_mode, should_stop=self.job.stopping)
            except Interrupted as exc:
                self._record_usage(exc.usage)
                raise _Stop(self.job.check() or StopReason.CANCELLED) from None
            except ContextOverflow as exc:
                self._record_usage(exc.usage)
                if attempt == 1:
                    raise _Stop(StopReason.CONTEXT_OVERFLOW, f"the conversation does not fit the model's context "
                                f"window even after compaction; the server said: {exc.detail}") from None
                log.info("trajectory %d: the server reported a context overflow; compacting", self.index)
                self.history.overflowed(exc.detail)
                self._compact(target=0.4, server_said=exc.detail)
                continue
            except ProviderError as exc:
                self._record_usage(exc.usage)
                raise _Stop(StopReason.LLM_ERROR, str(exc)) from None
            if turn.prompt_tokens:
                self.history.observe(turn.prompt_tokens, raw)
            return turn
        raise AssertionError("unreachable")

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> TrajectoryResult:
        strategy = self.strategy if not self.strategy_text else f"{self.strategy}: {self.strategy_text}"
        self.recorder.trajectory_started(index=self.index, temperature=self.temperature, strategy=strategy)
        error = None
        try:
            self._record({"role": "system", "content": system_prompt(
                self.spec.problem, self.spec.target, specs=self.specs, budgets=self.budgets,
                random_trials=self.spec.random_trials, strategy=self.strategy_text)})
            self._record({"role": "user", "content": problem_message(self.spec.problem, self.spec.target)})
            reason = self._turns()
        except _Stop as stop:
            reason, error = stop.reason, stop.error
        except Exception as exc:  # a bug must end this trajectory, not the worker
            log.exception("trajectory %d failed", self.index)
            reason = StopReason.INTERNAL_ERROR
            error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.recorder.trajectory_finished(index=self.index, reason=reason.value)
        return TrajectoryResult(index=self.index, temperature=self.temperature, strategy=self.strategy,
                                reason=reason, turns=self.turns, tool_calls=self.tool_calls,
                                best=self.ledger.best, error=error)

    def _turns(self) -> StopReason:
        while True:
            if (stopped := self.job.check()) is not None:
                return stopped
            if self.turns >= self.budgets.turns:
                return StopReason.TURNS
            if self.tool_calls >= self.budgets.tool_calls:
                return StopReason.TOOL_CALLS
            turn = self._complete()
            self.turns += 1
            self.job.add_usage(turn.usage, call=True)
            self.text_mode = self.text_mode or turn.text_mode
            self._record(turn.to_message(with_reasoning=self.pass_back_reasoning), turn)
            if not turn.tool_calls:
                self.silent_turns += 1
                if turn.refusal:
                    self.refusals.append(turn.refusal.strip())
                self._record({"role": "user", "content": self._nudge(turn)})
                continue
            ended = self._run_calls(turn)
            if ended is not None:
                return ended
            if self.infra_streak >= MAX_CONSECUTIVE_INFRA:
                return StopReason.INFRA_ERROR

    def _nudge(self, turn: AssistantTurn) -> str:
        budget = self._budget_line()
        if turn.refusal:
            return (f"You declined ({turn.refusal.strip()[:300]}). This is a routine performance-engineering task: a "
                    f"faster, numerically equivalent implementation of the model above. Please continue with a "
                    f"tool call. {budget}")
        if turn.finish_reason == "length":
            limit = getattr(self.spec.llm, "max_output_tokens", None)
            limit_text = f" ({limit} tokens)" if limit else ""
            return (f"Your message was cut off at the output length limit{limit_text} before it had a complete "
                    f"tool call. Keep the reasoning short and send the file in a tool call. {budget}")
        if not self.text_mode and self.auto_text and _CODE_IN_TEXT.search(turn.content or ""):
            # A server without a tool parser hands function calls back as text: speak text from now on.
            self.text_mode = True
            return ("Your message had code but no tool call: this server does not pass function calls through, so "
                    f"from now on call tools in text: {_TEXT_PROTOCOL}. Your next message is read that way. "
                    f"{budget}")
        if self.text_mode:
            return (f"Your message had no tool call, and every turn needs one. In this session tools are called in "
                    f"text: {_TEXT_PROTOCOL}. {budget}")
        return ("Your message had no tool call, and every turn needs one: compile, check_correctness, benchmark "
                f"or profile with the complete file as `source`, or submit(source) to finish. {budget}")

    def _run_calls(self, turn: AssistantTurn) -> StopReason | None:
        ended: StopReason | None = None
        last = len(turn.tool_calls) - 1
        for position, call in enumerate(turn.tool_calls):
            if ended is None and (stopped := self.job.check()) is not None:
                ended = stopped
            if ended is None and self.tool_calls >= self.budgets.tool_calls:
                ended = StopReason.TOOL_CALLS
            if ended is not None:
                self._record({"role": "tool", "tool_call_id": call.id,
                              "content": f"not run: the session ended ({ended.value})"})
                continue
            result = self.executor.execute(call, trajectory_index=self.index, ledger=self.ledger)
            self.attempted += 1 if (result.source is not None or result.infra_failure) else 0
            if result.charged:
                self.tool_calls += 1
                self.job.add_tool_call()
            self.infra_streak = self.infra_streak + 1 if result.infra_failure else 0
            self.job.observe(result.verdict)
            if result.ends_trajectory:
                ended = StopReason.SUBMITTED
            if ended is None and self.job.stop_reason is not None and result.infra_failure:
                ended = self.job.stop_reason  # the evaluation was cut because the job is stopping
            text = result.text
            if position == last and ended is None:
                text += "\n" + self._budget_line()
            self._record({"role": "tool", "tool_call_id": call.id, "content": text})
        return ended


def _best(candidates: Sequence[CandidateRecord | None]) -> CandidateRecord | None:
    found = [c for c in candidates if c is not None and c.median_ms is not None]
    return min(found, key=lambda c: c.median_ms or 0.0) if found else None


def run_job(spec: JobSpec, *, evaluator: Evaluator, recorder: Recorder, provider: LLMProvider | None = None,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> JobResult:
    """Run an agent job to its end.

    Args:
        spec: the problem, target, LLM profile, budgets and number of trajectories.
        evaluator: judges candidates. With several trajectories it is called from several threads:
            it must be thread-safe (the worker's ``RefereeEvaluator``, a `SerialEvaluator`); a bare
            `harness.Referee` is wrapped in a `SerialEvaluator` here. When the job must stop (wall
            clock, cancel, a budget, the target) its ``cancel()`` is called.
        recorder: stores trajectories, messages and attempts as they happen.
        provider: the LLM (default: built from ``spec.llm``).
        sleep: how to wait between infra retries.
        clock: monotonic seconds, for the wall-clock budget.

    Returns:
        The `JobResult`; failures (of the model, the endpoint, our infrastructure) are values in it,
        and a job without a verified kernel says why in ``failure`` and ``error``.
    """
    provider = provider or make_provider(spec.llm, problem=spec.problem, target=spec.target)
    own_serial = spec.trajectories > 1 and isinstance(evaluator, Referee)
    if own_serial:
        evaluator = SerialEvaluator(evaluator)
    try:
        return _run(spec, evaluator, recorder, provider, sleep=sleep, clock=clock)
    finally:
        if own_serial:
            assert isinstance(evaluator, SerialEvaluator)
            evaluator.close()


def _run(spec: JobSpec, evaluator: Evaluator, recorder: Recorder, provider: LLMProvider, *,
         sleep: Callable[[float], None], clock: Callable[[], float]) -> JobResult:
    shared = _SerialRecorder(recorder)
    job = _JobState(spec.budgets, shared, clock)
    executor = ToolExecutor(evaluator, shared, sleep=sleep, stopping=job.stopping)
    specs = executor.device_specs()
    trajectories = [
        _Trajectory(index=i, temperature=temperature, strategy=name, strategy_text=text, spec=spec, job=job,
                    executor=executor, provider=provider, recorder=shared, specs=specs)
        for i, (temperature, name, text) in enumerate(trajectory_plan(spec.trajectories))
    ]
    job.monitor(evaluator)
    try:
        if len(trajectories) == 1:
            results = [trajectories[0].run()]
        else:
            with ThreadPoolExecutor(max_workers=len(trajectories), thread_name_prefix="trajectory") as pool:
                results = list(pool.map(lambda t: t.run(), trajectories))
    finally:
        job.finish()
    if job.stop_reason is not None:
        reason = job.stop_reason
    elif all(r.reason.outcome == "failed" for r in results):
        reason = results[0].reason
    else:
        reason = StopReason.COMPLETED
    quarantined: dict[str, CandidateRecord] = {}
    for t in trajectories:
        for entry in t.ledger.quarantined:
            quarantined.setdefault(entry.source_sha256, entry)
    used = job.usage
    totals = Totals(tokens_in=used.tokens_in, tokens_out=used.tokens_out, cost_usd=used.cost_usd,
                    wall_s=clock() - job.started, llm_calls=job.llm_calls, tool_calls=job.tool_calls,
                    evaluations=executor.evaluations, tokens_reasoning=used.tokens_reasoning,
                    tokens_cached=used.tokens_cached)
    best = _best([r.best for r in results])
    failure, error = (None, None) if best is not None else _why_no_kernel(reason, results, trajectories, spec)
    return JobResult(best=best, reason=reason, totals=totals, trajectories=tuple(results),
                     quarantined=tuple(quarantined.values()), error=error, failure=failure)


_BUDGET_NAMES = {
    StopReason.TURNS: "turns", StopReason.TOOL_CALLS: "tool calls", StopReason.TOKENS: "tokens",
    StopReason.COST: "cost", StopReason.WALL_CLOCK: "wall clock",
}


def _budget_text(reason: StopReason, budgets: Budgets) -> str:
    value = {StopReason.TURNS: f"{budgets.turns}", StopReason.TOOL_CALLS: f"{budgets.tool_calls}",
             StopReason.TOKENS: f"{budgets.max_tokens:,}", StopReason.COST: f"${budgets.max_cost_usd:.2f}",
             StopReason.WALL_CLOCK: f"{budgets.wall_clock_s:g} s"}[reason]
    return f"the {_BUDGET_NAMES[reason]} budget ({value}) ran out"


def _why_no_kernel(reason: StopReason, results: Sequence[TrajectoryResult], trajectories: Sequence[_Trajectory],
                   spec: JobSpec) -> tuple[Failure, str]:
    """What a user needs to know of a job that produced no verified kernel."""
    attempts = sum(t.attempted for t in trajectories)
    turns = sum(t.turns for t in trajectories)
    failed = [r for r in results if r.reason.outcome == "failed" and r.error]
    if reason is StopReason.COMPLETED:  # every trajectory ended on its own: say why the first did
        reason = results[0].reason
    if reason is StopReason.CANCELLED:
        return Failure.CANCELLED, "cancelled before a verified kernel was found"
    if failed and all(r.reason.outcome == "failed" for r in results):
        first = failed[0]
        kind = {StopReason.CONTEXT_OVERFLOW: Failure.CONTEXT, StopReason.LLM_ERROR: Failure.LLM_ERROR,
                StopReason.INFRA_ERROR: Failure.INFRA}.get(first.reason, Failure.INTERNAL)
        hint = {Failure.CONTEXT: " (give the profile a larger context_window, or the server a larger context)",
                Failure.LLM_ERROR: " (check the LLM profile: base_url, model, key, parameters)"}.get(kind, "")
        return kind, f"{first.error}{hint}"
    if attempts == 0:
        refusals = [r for t in trajectories for r in t.refusals]
        if refusals and len(refusals) >= turns:
            return Failure.REFUSED, f"the model refused the task in all {turns} replies: {refusals[0][:300]}"
        why = _budget_text(reason, spec.budgets) if reason.is_budget else f"the session ended ({reason.value})"
        text = (f"the model made no attempt: none of its {turns} replies had a usable tool call, so no code was "
                f"evaluated; {why}")
        if any(t.text_mode for t in trajectories):
            text += (". The text tool protocol was in use: a model that cannot follow it needs a server with "
                     "function calling (a tool parser)")
        return Failure.NO_ATTEMPT, text
    passed = [n for t in trajectories for n in t.ledger.notes if n.status == "pass"]
    detail = f"{attempts} attempt{'s' if attempts != 1 else ''} made, none passed benchmark"
    if passed:
        detail += f" (furthest: {passed[-1].tool} passed, not timed)"
    if reason.is_budget:
        return Failure.BUDGET, f"no verified kernel: {detail} before {_budget_text(reason, spec.budgets)}"
    if reason is StopReason.TARGET_REACHED:
        return Failure.NOT_VERIFIED, f"no verified kernel: {detail}"
    return Failure.NOT_VERIFIED, f"no verified kernel: {detail}; the session ended ({reason.value})"
