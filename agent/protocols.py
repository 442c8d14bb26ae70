"""What the loop needs from the outside: something that judges candidates and somewhere to write.

The worker passes a `harness.Referee` (wrapped in `agent.SerialEvaluator` when trajectories run
concurrently) as the `Evaluator`, and a `Recorder` over ``store/``. Tests pass fakes with the same
shape (`tests.support.doubles`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from vocabulary.devices import DeviceSpecs
    from vocabulary.evaluation import Depth
    from vocabulary.verdict import Verdict
    from vocabulary.wire import JsonObject

__all__ = ["Evaluator", "Recorder"]


@runtime_checkable
class Evaluator(Protocol):
    """Judges one candidate source to a depth (``harness.Referee`` has this shape)."""

    def evaluate(self, source: str, depth: Depth | str) -> Verdict: ...

    @property
    def device_specs(self) -> DeviceSpecs: ...

    def cancel(self) -> None:
        """Stop for good: an evaluation in flight returns an error verdict soon after, later ones at
        once (the loop calls it when the job must stop: wall clock, cancel, a budget)."""
        ...


@runtime_checkable
class Recorder(Protocol):
    """Where a job's trajectories, messages and attempts go, as they happen.

    Calls come from the trajectories' threads; `run_job` serialises them, so an implementation
    need not be thread-safe itself (but must not be bound to the thread that created it).
    """

    def trajectory_started(self, *, index: int, temperature: float, strategy: str) -> None: ...

    def message(self, *, trajectory_index: int, role: str, content: str | None, tool_calls: Sequence[JsonObject] | None,
                tool_call_id: str | None, tokens_in: int, tokens_out: int, latency_ms: float,
                cost_usd: float, tokens_reasoning: int = 0, tokens_cached: int = 0) -> None:
        """One message (``tool_calls``: an assistant message's calls, as the history keeps them); an
        assistant message carries its call's usage (``tokens_reasoning`` is
        part of ``tokens_out``, ``tokens_cached`` part of ``tokens_in``)."""
        ...

    def usage(self, *, trajectory_index: int, tokens_in: int, tokens_out: int, cost_usd: float,
              tokens_reasoning: int = 0, tokens_cached: int = 0) -> None:
        """Usage of LLM calls that produced no message (abandoned, cut or failed tries): it is
        paid for all the same, so it counts towards the job's totals."""
        ...

    def find_attempt(self, *, source_sha256: str, tool: str) -> Verdict | None:
        """The stored verdict of this job's newest attempt with this source and tool, if any
        (verdicts with ``error_kind == "infra"`` excluded)."""
        ...

    def attempt(self, *, trajectory_index: int, tool: str, source: str, parent_sha256: str | None,
                verdict: Verdict) -> None: ...

    def trajectory_finished(self, *, index: int, reason: str) -> None: ...

    def cancelled(self) -> bool:
        """Whether the job was cancelled (checked before every LLM call and tool call)."""
        ...
