"""A job's specification, budgets and result: frozen values that cross into the worker."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from vocabulary.budgets import Budgets
from vocabulary.verdict import Verdict
from vocabulary.wire import JsonObject

if TYPE_CHECKING:
    from config.settings import LLMProfile
    from problems.spec import Problem

__all__ = [
    "CandidateRecord",
    "Failure",
    "JobResult",
    "JobSpec",
    "StopReason",
    "Totals",
    "TrajectoryResult",
]

class StopReason(StrEnum):
    """Why a trajectory (or the whole job) stopped."""

    SUBMITTED = "submitted"
    TURNS = "turns"
    TOOL_CALLS = "tool_calls"
    TOKENS = "tokens"
    COST = "cost"
    WALL_CLOCK = "wall_clock"
    TARGET_REACHED = "target_reached"
    CANCELLED = "cancelled"
    #: The LLM endpoint failed for good (retries exhausted, auth, a bad request).
    LLM_ERROR = "llm_error"
    #: The history did not fit even after summarising.
    CONTEXT_OVERFLOW = "context_overflow"
    #: Our evaluation infrastructure kept failing.
    INFRA_ERROR = "infra_error"
    #: A bug on our side; the message is in `JobResult.error`.
    INTERNAL_ERROR = "internal_error"
    #: Job level: every trajectory ended on its own.
    COMPLETED = "completed"

    @property
    def is_budget(self) -> bool:
        return self in (StopReason.TURNS, StopReason.TOOL_CALLS, StopReason.TOKENS, StopReason.COST,
                        StopReason.WALL_CLOCK)

    @property
    def outcome(self) -> str:
        """The trajectory state this ends in (the values of ``store.states.TrajectoryState``)."""
        if self is StopReason.SUBMITTED:
            return "submitted"
        if self is StopReason.CANCELLED:
            return "cancelled"
        if self in (StopReason.LLM_ERROR, StopReason.CONTEXT_OVERFLOW, StopReason.INFRA_ERROR,
                    StopReason.INTERNAL_ERROR):
            return "failed"
        return "exhausted"


class Failure(StrEnum):
    """Why a job produced no verified kernel, in terms a user can act on (`JobResult.failure`)."""

    #: The model never sent a usable tool call (no code was evaluated).
    NO_ATTEMPT = "no_attempt"
    #: The model declined the task.
    REFUSED = "refused"
    #: The conversation did not fit the model's context window.
    CONTEXT = "context"
    #: The LLM endpoint failed (its message is in the error).
    LLM_ERROR = "llm_error"
    #: Candidates were evaluated but none passed timing before a budget ran out.
    BUDGET = "budget"
    #: Candidates were evaluated but none passed timing (the model stopped, or submitted one that failed).
    NOT_VERIFIED = "not_verified"
    #: Our evaluation infrastructure kept failing.
    INFRA = "infra"
    #: A bug on our side.
    INTERNAL = "internal"
    #: The job was cancelled.
    CANCELLED = "cancelled"


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """One agent job.

    Args:
        problem: the parsed problem.
        target: ``cuda`` or ``cpu``.
        llm: the server-side LLM profile (``config.settings.LLMProfile``).
        budgets: the limits.
        trajectories: independent chats, run concurrently; the best verified attempt wins.
        random_trials: random-input trials the evaluator runs (``HarnessOptions.trials``), for the prompt.
        context_tokens: a context window smaller than the profile's, to keep requests cheaper
            (``None``: the profile's ``context_window``).
    """

    problem: Problem
    target: str
    llm: LLMProfile
    budgets: Budgets
    trajectories: int = 1
    random_trials: int = 3
    context_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.target not in ("cuda", "cpu"):
            raise ValueError(f"target must be 'cuda' or 'cpu', got {self.target!r}")
        if self.trajectories < 1:
            raise ValueError("trajectories must be at least 1")


@dataclass(frozen=True, kw_only=True)
class CandidateRecord:
    """One evaluated candidate as the agent keeps it: the source, where it came from, its verdict.

    What `JobResult.best` and `JobResult.quarantined` hold, and what the worker re-times. It becomes
    JSON only at an edge (``to_dict()``: the verdict's keys plus the record's own).
    """

    source: str
    source_sha256: str
    #: The tool that produced the verdict (``benchmark``, ``submit`` …).
    tool: str
    #: The index of the trajectory that produced it (`TrajectoryResult.index`), if any.
    trajectory_index: int | None
    #: The source this one was derived from in its trajectory, if any.
    parent_sha256: str | None
    verdict: Verdict

    @property
    def median_ms(self) -> float | None:
        return self.verdict.timing.median_ms if self.verdict.timing is not None else None

    def to_dict(self) -> JsonObject:
        return {**self.verdict.to_dict(), "source": self.source, "source_sha256": self.source_sha256,
                "tool": self.tool, "trajectory_index": self.trajectory_index, "parent_sha256": self.parent_sha256}


@dataclass(frozen=True)
class Totals:
    """What a job consumed."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    #: Of ``tokens_out``: hidden reasoning. Of ``tokens_in``: served from the prompt cache.
    tokens_reasoning: int = 0
    tokens_cached: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    #: Evaluations actually run (dedup hits excluded, infra retries included).
    evaluations: int = 0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def to_dict(self) -> JsonObject:
        return {**asdict(self), "tokens": self.tokens}


@dataclass(frozen=True)
class TrajectoryResult:
    index: int
    temperature: float
    strategy: str
    reason: StopReason
    turns: int
    tool_calls: int
    #: The trajectory's fastest verified attempt.
    best: CandidateRecord | None = None
    error: str | None = None

    def to_dict(self) -> JsonObject:
        return {"index": self.index, "temperature": self.temperature, "strategy": self.strategy,
                "reason": self.reason.value, "outcome": self.reason.outcome, "turns": self.turns,
                "tool_calls": self.tool_calls, "best": self.best.to_dict() if self.best else None,
                "error": self.error}


@dataclass(frozen=True)
class JobResult:
    """The outcome of `run_job`.

    ``best`` is the fastest verified candidate across trajectories (`Verdict.is_verified`: a timed
    ``pass`` of a benchmark; compile- or correctness-only passes and ``suspicious`` verdicts never
    count). ``quarantined`` lists the ``suspicious`` ones, for the worker to re-time. A job without a best has a
    ``failure`` and an ``error`` that says what happened and what to change.
    """

    best: CandidateRecord | None
    reason: StopReason
    totals: Totals
    trajectories: tuple[TrajectoryResult, ...] = ()
    quarantined: tuple[CandidateRecord, ...] = ()
    error: str | None = None
    failure: Failure | None = None

    @property
    def succeeded(self) -> bool:
        return self.best is not None

    def to_dict(self) -> JsonObject:
        return {"best": self.best.to_dict() if self.best else None, "reason": self.reason.value,
                "totals": self.totals.to_dict(),
                "trajectories": [t.to_dict() for t in self.trajectories],
                "quarantined": [q.to_dict() for q in self.quarantined], "error": self.error,
                "failure": self.failure.value if self.failure else None, "succeeded": self.succeeded}
