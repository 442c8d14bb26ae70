"""The admission sandbox's conversation: does a problem make a meaningful test, and its footprints.

The admission sandbox (`harness.sandboxed.roles.admission`) runs a submitted problem's code, as untrusted as a
candidate's: its replies are read through `vocabulary.wire.Reader` (`harness.admission`). Standard
library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from harness.protocol import Op, StartFailed, request_problem, request_trials, tagged
from harness.seeds import TrialSpec
from problems.constants import Constant, NotConstant, as_constant
from problems.spec import Problem
from vocabulary.evaluation import Target
from vocabulary.wire import JsonObject, Reader, WireError, as_object

__all__ = ["AdmissionCheck", "AdmissionReply", "AdmitRequest", "Footprint", "MeasureReply", "MeasureRequest",
           "Measured", "format_bytes"]


@dataclass(frozen=True, kw_only=True)
class AdmitRequest:
    """Run the admission checks of one problem on one target (`harness.admission.admit`)."""

    op: ClassVar[Op] = Op.ADMIT
    problem: Problem
    target: Target
    trials: tuple[TrialSpec, ...]
    init_seed: int
    weights_seed: int
    #: Weights drawn again from another seed: the output must change with them.
    other_weights_seed: int
    budget_bytes: int

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {
            "problem": self.problem.to_dict(), "target": self.target.value,
            "trials": [t.to_dict() for t in self.trials], "init_seed": self.init_seed,
            "weights_seed": self.weights_seed, "other_weights_seed": self.other_weights_seed,
            "budget_bytes": self.budget_bytes})

    @classmethod
    def from_dict(cls, data: object) -> AdmitRequest:
        r = Reader(data, "the admission request")
        return cls(problem=request_problem(r), target=Target(r.text("target")), trials=request_trials(r),
                   init_seed=r.integer("init_seed"), weights_seed=r.integer("weights_seed"),
                   other_weights_seed=r.integer("other_weights_seed"), budget_bytes=r.integer("budget_bytes"))


@dataclass(frozen=True)
class AdmissionCheck:
    name: str
    passed: bool
    detail: str

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: object) -> AdmissionCheck:
        r = Reader(data, "an admission check")
        return cls(r.text("name"), r.flag("passed"), r.text("detail", ""))


@dataclass(frozen=True, kw_only=True)
class AdmissionReply:
    """The checks' results, and what the problem's first trial looked like."""

    checks: tuple[AdmissionCheck, ...]
    forward_ms: float | None = None
    output_shapes: tuple[tuple[int, ...], ...] = ()
    output_dtypes: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return {"ok": True, "checks": [c.to_dict() for c in self.checks], "forward_ms": self.forward_ms,
                "output_shapes": [list(s) for s in self.output_shapes], "output_dtypes": list(self.output_dtypes)}

    @classmethod
    def from_reply(cls, raw: JsonObject) -> AdmissionReply | StartFailed:
        r = Reader(raw, "the admission reply")
        if not r.flag("ok", False):
            return StartFailed.read(r)
        return cls(checks=tuple(r.items_of("checks", AdmissionCheck.from_dict)),
                   forward_ms=r.optional_number("forward_ms"),
                   output_shapes=tuple(r.items_of("output_shapes", _shape, optional=True)),
                   output_dtypes=tuple(r.texts("output_dtypes", optional=True)))


def _shape(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in value):
        raise WireError("an output shape is not a list of integers")
    return tuple(value)


@dataclass(frozen=True)
class Footprint:
    """Bytes of one trial: its inputs, the model's parameters and buffers, its outputs (``None``
    when the forward does not run on the meta device)."""

    inputs: int
    parameters: int
    outputs: int | None

    @property
    def total(self) -> int:
        return self.inputs + self.parameters + (self.outputs or 0)

    def to_dict(self) -> JsonObject:
        return {"inputs": self.inputs, "parameters": self.parameters, "outputs": self.outputs}

    @classmethod
    def from_dict(cls, data: object) -> Footprint:
        r = Reader(data, "a footprint")
        return cls(r.integer("inputs"), r.integer("parameters"), r.optional_integer("outputs"))


def format_bytes(n: float) -> str:
    """A footprint's bytes for people: ``6.4 GB`` (here, not in the sandbox's `footprint`, so that
    the CLI formats them without importing torch)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _constants(value: object) -> dict[str, Constant]:
    try:
        return {name: as_constant(v) for name, v in as_object(value).items()}
    except NotConstant as exc:
        raise WireError(f"an override set holds a {exc}, not a constant") from None


@dataclass(frozen=True, kw_only=True)
class MeasureRequest:
    """The problem's footprint under each set of size constants, on the meta device."""

    op: ClassVar[Op] = Op.MEASURE
    problem: Problem
    overrides: tuple[Mapping[str, Constant], ...]

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {"problem": self.problem.to_dict(), "overrides": [dict(o) for o in self.overrides]})

    @classmethod
    def from_dict(cls, data: object) -> MeasureRequest:
        r = Reader(data, "the measure request")
        return cls(problem=request_problem(r), overrides=tuple(r.items_of("overrides", _constants)))


@dataclass(frozen=True, kw_only=True)
class Measured:
    """One override set's footprint, or why the meta device could not compute it."""

    footprint: Footprint | None
    error: str = ""

    def to_dict(self) -> JsonObject:
        if self.footprint is None:
            return {"ok": False, "error": self.error}
        return {"ok": True, **self.footprint.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> Measured:
        r = Reader(data, "a measured footprint")
        return cls(footprint=Footprint.from_dict(data) if r.flag("ok") else None, error=r.text("error", ""))


@dataclass(frozen=True, kw_only=True)
class MeasureReply:
    footprints: tuple[Measured, ...]

    def to_dict(self) -> JsonObject:
        return {"ok": True, "footprints": [m.to_dict() for m in self.footprints]}

    @classmethod
    def from_reply(cls, raw: JsonObject) -> MeasureReply | StartFailed:
        r = Reader(raw, "the measure reply")
        if not r.flag("ok", False):
            return StartFailed.read(r)
        return cls(footprints=tuple(r.items_of("footprints", Measured.from_dict)))
