"""An attempt's figures: what its verdict says in numbers, in the one shape every layer shares.

The store keeps them as an attempt's columns, the ``attempt`` job event carries them, the API's
attempt and best-attempt schemas are built from their fields, and the dashboard and the CLI read
them. Taken from a `Verdict` once (`AttemptFigures.of`); a figure that is not finite is ``None``.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from vocabulary.wire import JsonObject, Reader, finite_or_none

__all__ = ["AttemptFigures"]


@dataclass(frozen=True, kw_only=True)
class AttemptFigures:
    """An evaluated attempt in figures: its outcome, its time and its ratios to the baselines."""

    status: Status
    #: The last stage the evaluation reached; on failure, the one that failed.
    stage: Stage
    #: Whose fault an error is (``None`` unless ``status`` is ``error``).
    error_kind: ErrorKind | None = None
    correct: bool = False
    #: The candidate's median milliseconds per call (``None`` where it was not timed).
    median_ms: float | None = None
    #: Eager PyTorch's median over the candidate's: above 1 is faster.
    speedup_vs_eager: float | None = None
    #: ``torch.compile``'s median over the candidate's.
    speedup_vs_compile: float | None = None
    #: The candidate's share of the roofline's speed of light, in percent.
    pct_of_sol: float | None = None
    #: Seconds its build took (0 for a cached one; ``None`` where it did not build).
    compile_s: float | None = None

    @classmethod
    def of(cls, verdict: Verdict) -> AttemptFigures:
        return cls(
            status=verdict.status,
            stage=verdict.stage,
            error_kind=verdict.error_kind,
            correct=verdict.correct,
            median_ms=finite_or_none(verdict.timing.median_ms if verdict.timing else None),
            speedup_vs_eager=finite_or_none(verdict.speedup_vs_eager),
            speedup_vs_compile=finite_or_none(verdict.speedup_vs_compile),
            pct_of_sol=finite_or_none(verdict.pct_of_sol),
            compile_s=finite_or_none(verdict.compile.seconds if verdict.compile else None),
        )

    def to_dict(self) -> JsonObject:
        return {
            "status": self.status.value,
            "stage": self.stage.value,
            "error_kind": self.error_kind.value if self.error_kind else None,
            "correct": self.correct,
            "median_ms": self.median_ms,
            "speedup_vs_eager": self.speedup_vs_eager,
            "speedup_vs_compile": self.speedup_vs_compile,
            "pct_of_sol": self.pct_of_sol,
            "compile_s": self.compile_s,
        }

    @classmethod
    def from_dict(cls, data: object) -> AttemptFigures:
        r = Reader(data, "an attempt's figures")
        return cls(
            status=r.choice("status", Status),
            stage=r.choice("stage", Stage),
            error_kind=r.optional_choice("error_kind", ErrorKind),
            correct=r.flag("correct", False),
            median_ms=r.optional_number("median_ms"),
            speedup_vs_eager=r.optional_number("speedup_vs_eager"),
            speedup_vs_compile=r.optional_number("speedup_vs_compile"),
            pct_of_sol=r.optional_number("pct_of_sol"),
            compile_s=r.optional_number("compile_s"),
        )
