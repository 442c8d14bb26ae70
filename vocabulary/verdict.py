"""Result values of an evaluation: `Verdict` and the pieces it is made of.

Every type here is a frozen dataclass with ``to_dict()`` / ``from_dict()``; they become JSON only
at the edges (the private pipe, the database column, the API, the CLI's ``--json``). The JSON
shape is the same everywhere (docs/architecture.md, "The verdict").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from vocabulary.builds import CompileResult
from vocabulary.causes import KernelError
from vocabulary.evaluation import Depth
from vocabulary.flags import Flag
from vocabulary.provenance import Provenance
from vocabulary.stages import StageSeconds
from vocabulary.timing import Baselines, Timing
from vocabulary.wire import JsonObject, Reader, finite_or_none

__all__ = [
    "AttemptKind",
    "ErrorKind",
    "ProfileRow",
    "Stage",
    "Status",
    "Trial",
    "Verdict",
    "attempt_kind",
    "source_sha256",
]


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    #: Faster than we believe possible (over 10x, or under the roofline): not a job's best until
    #: re-timed in a fresh process with fresh seeds.
    SUSPICIOUS = "suspicious"


class Stage(StrEnum):
    """The last stage an evaluation reached; on failure, the one that failed."""

    PROBLEM = "problem"
    COMPILE = "compile"
    LOAD = "load"
    CORRECTNESS = "correctness"
    INTEGRITY = "integrity"
    TIMING = "timing"
    DONE = "done"


class ErrorKind(StrEnum):
    #: The candidate's fault: compile error, wrong output, crash, timeout. Fed back to the LLM.
    CANDIDATE = "candidate"
    #: Ours: a worker died, the GPU was busy, a cache was corrupt. Retried, never charged.
    INFRA = "infra"
    #: The problem's own code (the user's reference) raised, hung or exhausted a limit in the
    #: reference sandbox: no candidate can be judged against it. Never retried, never fed back as
    #: the candidate's fault; the message names the problem's file and line, or the limit.
    PROBLEM = "problem"
    #: The evaluation was cut short because its job is stopping (a cancel, a budget, the wall
    #: clock): it judged nothing. Neither the candidate's fault nor a failure of ours: never
    #: retried, never charged, never fed back, never served again for the same source.
    CANCELLED = "cancelled"


def source_sha256(source: str) -> str:
    """A candidate's identity: SHA-256 of its UTF-8 source, hex (attempts are deduplicated by it)."""
    return hashlib.sha256(source.encode()).hexdigest()


@dataclass(frozen=True)
class Trial:
    """The comparison of one trial's output with the reference's."""

    seed_index: int
    passed: bool
    max_abs_err: float | None
    mean_abs_err: float | None
    mismatch_frac: float
    #: Which inputs: "random", "variant" (another value distribution) or "shape:<k>".
    kind: str = "random"
    message: str = ""

    def to_dict(self) -> JsonObject:
        return {
            "seed_index": self.seed_index,
            "passed": self.passed,
            "max_abs_err": finite_or_none(self.max_abs_err),
            "mean_abs_err": finite_or_none(self.mean_abs_err),
            "mismatch_frac": self.mismatch_frac,
            "kind": self.kind,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: object) -> Trial:
        r = Reader(data, "a trial")
        return cls(seed_index=r.integer("seed_index"), passed=r.flag("passed"),
                   max_abs_err=r.optional_number("max_abs_err"), mean_abs_err=r.optional_number("mean_abs_err"),
                   mismatch_frac=r.number("mismatch_frac"), kind=r.text("kind", "random"),
                   message=r.text("message", ""))


@dataclass(frozen=True, kw_only=True)
class ProfileRow:
    """One kernel (or op) of a profile: calls and device time per forward (self CPU time on cpu)."""

    name: str
    calls: int | None = None
    ms_per_forward: float | None = None
    #: The figure under its first name (rows written before ``ms_per_forward``, fixtures).
    total_ms: float | None = None

    @property
    def ms(self) -> float:
        """Milliseconds per forward, whichever name the row gives them."""
        return self.ms_per_forward if self.ms_per_forward is not None else (self.total_ms or 0.0)

    def to_dict(self) -> JsonObject:
        row: JsonObject = {"name": self.name, "calls": self.calls, "ms_per_forward": self.ms_per_forward,
                           "total_ms": self.total_ms}
        return {key: value for key, value in row.items() if value is not None}

    @classmethod
    def from_dict(cls, data: object) -> ProfileRow:
        r = Reader(data, "a profile row")
        return cls(name=r.text("name"), calls=r.optional_integer("calls"),
                   ms_per_forward=r.optional_number("ms_per_forward"), total_ms=r.optional_number("total_ms"))


@dataclass(frozen=True)
class Verdict:
    """The referee's answer for one candidate. Plain JSON through ``to_dict()``."""

    status: Status
    stage: Stage
    error_kind: ErrorKind | None = None
    message: str = ""
    compile: CompileResult | None = None
    trials: tuple[Trial, ...] = ()
    timing: Timing | None = None
    baselines: Baselines | None = None
    sol_ms: float | None = None
    flops: float | None = None
    min_bytes: float | None = None
    flags: tuple[Flag, ...] = ()
    #: Advice for the author (static patterns); never decides the status.
    hints: tuple[str, ...] = ()
    log: str = ""
    #: Empty (``{}`` in JSON) when the evaluation stopped before the referee knew its device.
    provenance: Provenance = field(default_factory=Provenance)
    #: How far the evaluation was asked to go: compile, correctness, benchmark or profile.
    depth: Depth = Depth.BENCHMARK
    #: Per-kernel rows from the torch profiler (depth "profile").
    profile: tuple[ProfileRow, ...] = ()
    #: Extension functions that raised at run time while forward went on (`vocabulary.causes`).
    kernel_errors: tuple[KernelError, ...] = ()
    #: How the candidate was taken that is no failure (its weights loaded by registration order).
    notes: tuple[str, ...] = ()
    #: Seconds each stage of this evaluation took.
    stage_seconds: StageSeconds = field(default_factory=StageSeconds)

    def __post_init__(self) -> None:
        # The enums at the door, whatever a caller passed (their values are the JSON's strings).
        object.__setattr__(self, "depth", Depth(self.depth))
        object.__setattr__(self, "flags", tuple(Flag(f) for f in self.flags))

    # -- derived figures -------------------------------------------------------------------
    @property
    def compiled(self) -> bool:
        return self.compile is not None and self.compile.ok

    @property
    def correct(self) -> bool:
        return bool(self.trials) and all(t.passed for t in self.trials)

    @property
    def baselines_ms(self) -> tuple[float | None, float | None]:
        """Eager PyTorch's and ``torch.compile``'s medians (None where not timed)."""
        b = self.baselines
        return (b.eager_ms, b.torch_compile_ms) if b is not None else (None, None)

    @property
    def is_verified(self) -> bool:
        """Whether this can be a job's best: a timed ``pass`` of a full benchmark (compile- or
        correctness-only passes, profiles and ``suspicious`` verdicts never are). The one rule the
        agent, the worker and the store use."""
        return self.status is Status.PASS and self.depth is Depth.BENCHMARK and self.timing is not None

    def _speedup(self, baseline: Timing | None) -> float | None:
        if baseline is None or self.timing is None or self.timing.median_ms <= 0:
            return None
        return baseline.median_ms / self.timing.median_ms

    @property
    def speedup_vs_eager(self) -> float | None:
        return self._speedup(self.baselines.eager if self.baselines else None)

    @property
    def speedup_vs_compile(self) -> float | None:
        return self._speedup(self.baselines.torch_compile if self.baselines else None)

    @property
    def pct_of_sol(self) -> float | None:
        if self.sol_ms is None or self.timing is None or self.timing.median_ms <= 0:
            return None
        return 100.0 * self.sol_ms / self.timing.median_ms

    def with_changes(self, **changes: Any) -> Verdict:
        return replace(self, **changes)

    # -- JSON ------------------------------------------------------------------------------
    def to_dict(self) -> JsonObject:
        return {
            "status": self.status.value,
            "stage": self.stage.value,
            "error_kind": self.error_kind.value if self.error_kind else None,
            "compiled": self.compiled,
            "compile_s": self.compile.seconds if self.compile else None,
            "correct": self.correct,
            "trials": [t.to_dict() for t in self.trials],
            "timing": self.timing.to_dict() if self.timing else None,
            "baselines": self.baselines.to_dict() if self.baselines else None,
            "speedup_vs_eager": self.speedup_vs_eager,
            "speedup_vs_compile": self.speedup_vs_compile,
            "sol_ms": self.sol_ms,
            "pct_of_sol": self.pct_of_sol,
            "flops": self.flops,
            "min_bytes": self.min_bytes,
            "flags": list(self.flags),
            "hints": list(self.hints),
            "message": self.message,
            "log": self.log,
            "compile": self.compile.to_dict() if self.compile else None,
            "provenance": self.provenance.to_dict(),
            "depth": self.depth,
            "profile": [row.to_dict() for row in self.profile],
            "kernel_errors": [e.to_dict() for e in self.kernel_errors],
            "notes": list(self.notes),
            "stage_seconds": self.stage_seconds.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: object) -> Verdict:
        """From ``to_dict()``'s JSON, as stored with an attempt (derived figures are recomputed)."""
        r = Reader(data, "the verdict")
        provenance = r.nested("provenance", optional=True)  # {}: none recorded
        return cls(
            status=Status(r.text("status")),
            stage=Stage(r.text("stage")),
            error_kind=ErrorKind(r.text("error_kind")) if r.has("error_kind") else None,
            message=r.text("message", ""),
            compile=CompileResult.from_dict(r.data["compile"]) if r.has("compile") else None,
            trials=tuple(r.items_of("trials", Trial.from_dict, optional=True)),
            timing=Timing.from_dict(r.data["timing"]) if r.has("timing") else None,
            baselines=Baselines.from_dict(r.data["baselines"]) if r.has("baselines") else None,
            sol_ms=r.optional_number("sol_ms"),
            flops=r.optional_number("flops"),
            min_bytes=r.optional_number("min_bytes"),
            flags=tuple(Flag(f) for f in r.texts("flags", optional=True)),
            hints=tuple(r.texts("hints", optional=True)),
            log=r.text("log", ""),
            provenance=Provenance.from_dict(provenance.data),
            depth=Depth(r.text("depth", Depth.BENCHMARK)),
            profile=tuple(r.items_of("profile", ProfileRow.from_dict, optional=True)),
            kernel_errors=tuple(r.items_of("kernel_errors", KernelError.from_dict, optional=True)),
            notes=tuple(r.texts("notes", optional=True)),
            stage_seconds=StageSeconds.from_dict(r.nested("stage_seconds", optional=True).data),
        )


class AttemptKind(StrEnum):
    """What an evaluation came to, in the terms of where the lane's time goes (`attempt_kind`)."""

    #: The candidate did not build (or its build timed out): no lane time.
    COMPILE_ERROR = "compile_error"
    #: Built, then failed correctness or integrity, crashed or raised.
    WRONG = "wrong"
    #: Passed all it was asked (a compile- or correctness-only check too) but not shown faster than
    #: eager: slower, untimed, or ``suspicious`` (quarantined until a re-time passes).
    CORRECT = "correct"
    #: A verified (timed ``pass``) kernel faster than eager PyTorch.
    FAST = "fast"
    #: No judgment of the candidate: our infrastructure, the problem's own code, or a time limit.
    ERROR = "error"


#: How the referee words a candidate sandbox killed at its time limit (`harness.candidaterun`).
_TIMED_OUT = " timed out"


def attempt_kind(verdict: Verdict) -> AttemptKind:
    """The one classification of a verdict for metrics, reports and the dashboard."""
    if verdict.error_kind in (ErrorKind.INFRA, ErrorKind.PROBLEM):
        return AttemptKind.ERROR
    if verdict.status is Status.ERROR and verdict.stage is Stage.COMPILE:
        return AttemptKind.COMPILE_ERROR
    if verdict.status is Status.ERROR and verdict.message.endswith(_TIMED_OUT):
        return AttemptKind.ERROR
    if verdict.status in (Status.FAIL, Status.ERROR):
        return AttemptKind.WRONG
    speedup = verdict.speedup_vs_eager
    if verdict.is_verified and speedup is not None and speedup > 1.0:
        return AttemptKind.FAST
    return AttemptKind.CORRECT
