"""The one infra-retry policy: how an evaluation that failed for our reasons is tried again.

The agent's tool executor (agent jobs: each try recorded, none charged) and the worker's
evaluator (evaluation jobs, reference starts) both follow it. A small value, so which verdicts
count as retryable can change in one place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from vocabulary.verdict import ErrorKind, Verdict

__all__ = ["INFRA_RETRY", "NO_RETRY", "InfraRetry"]


@dataclass(frozen=True)
class InfraRetry:
    """Pauses before each retry (so ``len(delays_s)`` retries) and which verdicts are retried.

    Args:
        delays_s: seconds to wait before the first, second … retry. Long enough for a busy GPU or a
            restarted reference process to settle, short against a job's minutes.
    """

    delays_s: tuple[float, ...] = (2.0, 10.0)

    def __post_init__(self) -> None:
        if any(delay < 0 for delay in self.delays_s):
            raise ValueError(f"retry delays must not be negative: {self.delays_s}")

    @property
    def retries(self) -> int:
        return len(self.delays_s)

    def retryable(self, verdict: Verdict) -> bool:
        """Whether this verdict is our failure, worth another try (the candidate's never are)."""
        return verdict.error_kind is ErrorKind.INFRA

    def pauses(self) -> Iterator[float | None]:
        """One item per try: the pause before the next try, ``None`` on the last one."""
        yield from self.delays_s
        yield None


#: The service's policy: two retries, after 2 s and 10 s.
INFRA_RETRY = InfraRetry()
#: No retry (the caller retries, or a test wants the first answer).
NO_RETRY = InfraRetry(delays_s=())
