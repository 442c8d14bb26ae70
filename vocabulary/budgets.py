"""A job's budgets: the limits it runs under, resolved once when the job is created.

The API (and ``kernelloop optimize``, which writes jobs as the API would) fills what a request
leaves out from the service's defaults (`config.Settings.default_budgets`), bounds the cost by
the key's cap and stores every budget in the job's row; the worker reads them back as they are.

Standard library only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vocabulary.wire import JsonObject, Reader

__all__ = ["DEFAULT_COST_CAP_USD", "DEFAULT_MAX_CONCURRENT_JOBS", "DEFAULT_MAX_JOBS_PER_DAY", "Budgets"]

#: Per-key quotas given to a new key unless the admin says otherwise. Two concurrent jobs keep
#: one key from filling every GPU queue; fifty a day bounds a runaway script.
DEFAULT_MAX_CONCURRENT_JOBS = 2
DEFAULT_MAX_JOBS_PER_DAY = 50
#: ``None``: no cost cap (a local model costs nothing).
DEFAULT_COST_CAP_USD: float | None = None


@dataclass(frozen=True, kw_only=True)
class Budgets:
    """Limits per trajectory (turns, tool calls, as in the seeds) and per job (the rest).

    Args:
        turns: assistant messages per trajectory.
        tool_calls: tool calls per trajectory (infra failures are not charged).
        max_tokens: prompt + completion tokens over the whole job.
        max_cost_usd: over the whole job, from the profile's prices.
        wall_clock_s: for the whole job.
        target_speedup: stop the job once a verified candidate is this much faster than eager.
    """

    turns: int
    tool_calls: int
    max_tokens: int
    max_cost_usd: float
    wall_clock_s: float
    target_speedup: float | None = None

    def __post_init__(self) -> None:
        for name in ("turns", "tool_calls", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"Budgets.{name} must be at least 1")
        if self.max_cost_usd < 0 or self.wall_clock_s <= 0:
            raise ValueError("Budgets.max_cost_usd must be >= 0 and wall_clock_s > 0")
        if self.target_speedup is not None and self.target_speedup <= 0:
            raise ValueError("Budgets.target_speedup must be positive")

    def to_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, *, defaults: Budgets) -> Budgets:
        """The budgets a job's row stores; a budget it lacks is ``defaults``' (a row written before
        every job stored all of its budgets).

        Raises:
            WireError: a budget that is not a number.
            ValueError: a budget out of its range.
        """
        r = Reader(data or {}, "the job's budgets")
        return cls(
            turns=r.integer("turns", defaults.turns),
            tool_calls=r.integer("tool_calls", defaults.tool_calls),
            max_tokens=r.integer("max_tokens", defaults.max_tokens),
            max_cost_usd=r.number("max_cost_usd", defaults.max_cost_usd),
            wall_clock_s=r.number("wall_clock_s", defaults.wall_clock_s),
            target_speedup=r.optional_number("target_speedup") if r.has("target_speedup") else defaults.target_speedup,
        )
