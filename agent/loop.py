"""The agent loop: trajectories of LLM turns and tool calls, under budgets, best-of across them.

`run_job` starts ``spec.trajectories`` independent chats (threads: their LLM calls and compiles
overlap; the evaluator serialises what must not), each with its own temperature and strategy hint,
and returns the fastest verified attempt of all. Every message is handed to the `Recorder` as it
happens. Per trajectory it enforces turns and tool calls; per job tokens, cost and wall clock; it
stops early at the target speedup, and between steps it checks for cancellation.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agent.feedback import summarise_history
from agent.job import Budgets, JobResult, JobSpec, StopReason, Totals, TrajectoryResult
from agent.prompt import problem_message, system_prompt
from agent.protocols import Evaluator, Recorder
from agent.providers import make_provider
from agent.providers.base import AssistantTurn, ContextOverflow, LLMProvider, ProviderError, estimate_tokens
from agent.serial import SerialEvaluator
from agent.tools import Ledger, ToolExecutor, is_verified, tool_schemas
from harness.evaluate import Referee

__all__ = ["KEEP_TURNS", "STRATEGIES", "TEMPERATURES", "run_job", "trajectory_plan"]

log = logging.getLogger(__name__)

#: Assistant turns (with their tool results) kept verbatim when a history is summarised.
KEEP_TURNS = 3
#: After consecutive infra failures a trajectory gives up (each one is retried already).
MAX_CONSECUTIVE_INFRA = 3
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

Message = dict[str, Any]


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


class _JobState:
    """What trajectories share: usage totals, the stop signal, the clock."""

    def __init__(self, budgets: Budgets, recorder: Any, clock: Callable[[], float]) -> None:
        self.budgets = budgets
        self.recorder = recorder
        self.clock = clock
        self.started = clock()
        self.lock = threading.Lock()
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost_usd = 0.0
        self.llm_calls = 0
        self.tool_calls = 0
        self.stop_reason: StopReason | None = None

    def stop(self, reason: StopReason) -> None:
        with self.lock:
            if self.stop_reason is None:
                self.stop_reason = reason

    def check(self) -> StopReason | None:
        """Why the job must stop now, if it must (checked at every safe point)."""
        if self.stop_reason is None:
            if self.recorder.cancelled():
                self.stop(StopReason.CANCELLED)
            elif self.clock() - self.started >= self.budgets.wall_clock_s:
                self.stop(StopReason.WALL_CLOCK)
            elif self.tokens_in + self.tokens_out >= self.budgets.max_tokens:
                self.stop(StopReason.TOKENS)
            elif self.cost_usd > 0 and self.cost_usd >= self.budgets.max_cost_usd:
                self.stop(StopReason.COST)
        return self.stop_reason

    def add_turn(self, turn: AssistantTurn) -> None:
        with self.lock:
            self.tokens_in += turn.usage.tokens_in
            self.tokens_out += turn.usage.tokens_out
            self.cost_usd += turn.usage.cost_usd
            self.llm_calls += 1

    def add_tool_call(self) -> None:
        with self.lock:
            self.tool_calls += 1

    def observe(self, verdict: Mapping[str, Any] | None) -> None:
        target = self.budgets.target_speedup
        if target is not None and verdict and is_verified(dict(verdict)):
            speedup = verdict.get("speedup_vs_eager")
            if speedup is not None and speedup >= target:
                self.stop(StopReason.TARGET_REACHED)


class _Stop(Exception):
    def __init__(self, reason: StopReason, error: str | None = None) -> None:
        self.reason = reason
        self.error = error
        super().__init__(reason.value)


class _Trajectory:
    """One chat: the opening, then turns until a budget, submit, or the job stops."""

    def __init__(self, *, index: int, temperature: float, strategy: str, strategy_text: str | None, spec: JobSpec,
                 job: _JobState, executor: ToolExecutor, provider: LLMProvider, recorder: Any,
                 specs: Mapping[str, Any] | None) -> None:
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
        self.context: list[Message] = []
        self.turns = 0
        self.tool_calls = 0
        self.infra_streak = 0

    # -- messages ----------------------------------------------------------------------------
    def _record(self, message: Message, turn: AssistantTurn | None = None) -> None:
        self.context.append(message)
        self.recorder.message(
            trajectory=self.index, role=message["role"], content=message.get("content"),
            tool_calls=message.get("tool_calls"), tool_call_id=message.get("tool_call_id"),
            tokens_in=turn.usage.tokens_in if turn else 0, tokens_out=turn.usage.tokens_out if turn else 0,
            latency_ms=turn.latency_ms if turn else 0.0, cost_usd=turn.usage.cost_usd if turn else 0.0,
        )

    def _summarise(self, keep_turns: int) -> None:
        best = self.ledger.best
        best_line = None
        if best:
            best_line = (f"{best['tool']}: {best['timing']['median_ms']:.4g} ms, "
                         f"{best.get('speedup_vs_eager') or 0:.2f}x vs eager")
        summarised = summarise_history(self.context, self.ledger.notes, keep_turns=keep_turns,
                                       best_source=best["source"] if best else None, best_line=best_line)
        # The summary is a message the model reads: store it like any other.
        summary = summarised[2]
        self.recorder.message(trajectory=self.index, role=summary["role"], content=summary["content"],
                              tool_calls=None, tool_call_id=None, tokens_in=0, tokens_out=0, latency_ms=0.0,
                              cost_usd=0.0)
        self.context = summarised

    def _budget_line(self) -> str:
        turns_left = self.budgets.turns - self.turns
        calls_left = self.budgets.tool_calls - self.tool_calls
        if turns_left <= 0 or calls_left <= 0:
            return "[budget used up: the session ends here; your fastest benchmarked correct candidate counts]"
        line = f"[budget left: {turns_left} turns, {calls_left} tool calls]"
        if turns_left == 1 or calls_left == 1:
            line += " Your next turn is the last: submit(source) your fastest correct candidate."
        return line

    # -- one LLM call ------------------------------------------------------------------------
    def _complete(self) -> AssistantTurn:
        if estimate_tokens(self.context) > self.spec.context_tokens:
            self._summarise(KEEP_TURNS)
        for attempt in range(2):
            try:
                return self.provider.complete(self.context, self.tools, temperature=self.temperature)
            except ContextOverflow as exc:
                if attempt == 1:
                    raise _Stop(StopReason.CONTEXT_OVERFLOW, str(exc)) from None
                log.info("trajectory %d: context overflow, summarising", self.index)
                self._summarise(1)
            except ProviderError as exc:
                raise _Stop(StopReason.LLM_ERROR, str(exc)) from None
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
            self.job.add_turn(turn)
            self._record(turn.to_message(), turn)
            if not turn.tool_calls:
                self._record({"role": "user", "content": self._nudge(turn)})
                continue
            ended = self._run_calls(turn)
            if ended is not None:
                return ended
            if self.infra_streak >= MAX_CONSECUTIVE_INFRA:
                return StopReason.INFRA_ERROR

    def _nudge(self, turn: AssistantTurn) -> str:
        left = self.budgets.turns - self.turns
        if turn.refusal:
            return (f"You declined ({turn.refusal.strip()[:300]}). This is a routine performance-engineering task: a "
                    "faster, numerically equivalent implementation of the model above. Please continue with a "
                    f"tool call. ({left} turns left)")
        if turn.finish_reason == "length":
            return ("Your message was cut off at the output length limit and had no complete tool call. Keep the "
                    f"reasoning short and send the file in a tool call. ({left} turns left)")
        return ("Your message had no tool call, and every turn needs one: compile, check_correctness, benchmark "
                "or profile with the complete file as `source`, or submit(source) to finish. "
                f"({left} turns left)")

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
            result = self.executor.execute(call, trajectory=self.index, ledger=self.ledger)
            if result.charged:
                self.tool_calls += 1
                self.job.add_tool_call()
            self.infra_streak = self.infra_streak + 1 if result.infra_failure else 0
            self.job.observe(result.verdict)
            if result.ends_trajectory:
                ended = StopReason.SUBMITTED
            text = result.text
            if position == last and ended is None:
                text += "\n" + self._budget_line()
            self._record({"role": "tool", "tool_call_id": call.id, "content": text})
        return ended


def _best(candidates: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    found = [c for c in candidates if c is not None]
    return min(found, key=lambda c: c["timing"]["median_ms"]) if found else None


def run_job(spec: JobSpec, *, evaluator: Evaluator, recorder: Recorder, provider: LLMProvider | None = None,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> JobResult:
    """Run an agent job to its end.

    Args:
        spec: the problem, target, LLM profile, budgets and number of trajectories.
        evaluator: judges candidates. With several trajectories it is called from several threads:
            it must be thread-safe (the worker's ``RefereeEvaluator``, a `SerialEvaluator`); a bare
            `harness.Referee` is wrapped in a `SerialEvaluator` here.
        recorder: stores trajectories, messages and attempts as they happen.
        provider: the LLM (default: built from ``spec.llm``).
        sleep: how to wait between infra retries.
        clock: monotonic seconds, for the wall-clock budget.

    Returns:
        The `JobResult`; failures (of the model, the endpoint, our infrastructure) are values in it.
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
    executor = ToolExecutor(evaluator, shared, sleep=sleep)
    specs = executor.device_specs()
    trajectories = [
        _Trajectory(index=i, temperature=temperature, strategy=name, strategy_text=text, spec=spec, job=job,
                    executor=executor, provider=provider, recorder=shared, specs=specs)
        for i, (temperature, name, text) in enumerate(trajectory_plan(spec.trajectories))
    ]
    if len(trajectories) == 1:
        results = [trajectories[0].run()]
    else:
        with ThreadPoolExecutor(max_workers=len(trajectories), thread_name_prefix="trajectory") as pool:
            results = list(pool.map(lambda t: t.run(), trajectories))
    if job.stop_reason is not None:
        reason = job.stop_reason
    elif all(r.reason.outcome == "failed" for r in results):
        reason = results[0].reason
    else:
        reason = StopReason.COMPLETED
    quarantined: dict[str, dict[str, Any]] = {}
    for t in trajectories:
        for entry in t.ledger.quarantined:
            quarantined.setdefault(entry["source_sha256"], entry)
    totals = Totals(tokens_in=job.tokens_in, tokens_out=job.tokens_out, cost_usd=job.cost_usd,
                    wall_s=clock() - job.started, llm_calls=job.llm_calls, tool_calls=job.tool_calls,
                    evaluations=executor.evaluations)
    best = _best([r.best for r in results])
    # A job-level error only when the job as a whole failed with nothing to show; trajectories keep theirs.
    failed = reason.outcome == "failed" and best is None
    error = next((r.error for r in results if r.error), None) if failed else None
    return JobResult(best=best, reason=reason, totals=totals, trajectories=tuple(results),
                     quarantined=tuple(quarantined.values()), error=error)
