"""The candidate sandbox's conversation: its load, the trials, the profile and the metered timing loop.

The candidate sandbox (`harness.sandboxed.roles.candidate`) runs the candidate's code: every reply is read
where it enters, through `vocabulary.wire.Reader`, and a malformed one is the candidate's fault
(`harness.candidaterun`). Its requests carry derived seeds only, never the job's secret nor an
expected output. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from harness.protocol import Op, StartFailed, request_problem, request_trials, tagged
from harness.seeds import TrialSpec
from problems.spec import Problem
from vocabulary.causes import KernelError
from vocabulary.evaluation import Target
from vocabulary.verdict import ProfileRow
from vocabulary.wire import JsonObject, JsonValue, Reader, WireError

__all__ = ["CandidateLoad", "Loaded", "ProfileReply", "ProfileRequest", "TimeRequest", "TrialReply", "TrialRequest"]


@dataclass(frozen=True, kw_only=True)
class CandidateLoad:
    """Load the candidate from its own builds and build ``ModelNew`` with the reference weights:
    derived seeds only, never the job's secret nor an expected output."""

    op: ClassVar[Op] = Op.LOAD
    workdir: Path
    problem: Problem
    target: Target
    candidate_path: Path
    builds_dir: Path
    #: The metered loop's extension (a copy in the sandbox's run directory), loaded first.
    meter_path: Path
    arch_list: str
    transport: str
    init_seed: int
    weights_seed: int
    trials: tuple[TrialSpec, ...]

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {
            "workdir": str(self.workdir), "problem": self.problem.to_dict(), "target": self.target.value,
            "candidate_path": str(self.candidate_path), "builds_dir": str(self.builds_dir),
            "meter_path": str(self.meter_path),
            "arch_list": self.arch_list, "transport": self.transport, "init_seed": self.init_seed,
            "weights_seed": self.weights_seed, "trials": [t.to_dict() for t in self.trials]})

    @classmethod
    def from_dict(cls, data: object) -> CandidateLoad:
        r = Reader(data, "the candidate's load request")
        return cls(workdir=Path(r.text("workdir")), problem=request_problem(r), target=Target(r.text("target")),
                   candidate_path=Path(r.text("candidate_path")), builds_dir=Path(r.text("builds_dir")),
                   meter_path=Path(r.text("meter_path")),
                   arch_list=r.text("arch_list"), transport=r.text("transport", "file"),
                   init_seed=r.integer("init_seed"), weights_seed=r.integer("weights_seed"), trials=request_trials(r))


@dataclass(frozen=True, kw_only=True)
class Loaded:
    """The candidate is loaded; ``extensions``: the modules of its own builds it imported;
    ``renamed``: (Model's name, ModelNew's name) of each weight loaded by registration order
    (`harness.sandboxed.contract.reference_weights_for`); ``kernel_errors``: what its extension functions
    raised while it loaded (and it went on)."""

    extensions: tuple[str, ...]
    renamed: tuple[tuple[str, str], ...] = ()
    kernel_errors: tuple[KernelError, ...] = ()

    def to_dict(self) -> JsonObject:
        return {"ok": True, "extensions": list(self.extensions), "renamed": [list(p) for p in self.renamed],
                "kernel_errors": [e.to_dict() for e in self.kernel_errors]}

    @classmethod
    def from_reply(cls, raw: JsonObject) -> Loaded | StartFailed:
        r = Reader(raw, "the candidate's load reply")
        if not r.flag("ok"):
            return StartFailed.read(r)
        return cls(extensions=tuple(r.texts("extensions", optional=True)),
                   renamed=tuple(_pair(p) for p in r.items("renamed", optional=True)),
                   kernel_errors=tuple(r.items_of("kernel_errors", KernelError.from_dict, optional=True)))


def _pair(data: object) -> tuple[str, str]:
    if not (isinstance(data, list) and len(data) == 2 and all(isinstance(x, str) for x in data)):
        raise WireError("the candidate's load reply: a renamed weight is not a pair of names")
    return data[0], data[1]


@dataclass(frozen=True, kw_only=True)
class TrialRequest:
    """Run one trial's forward (``noop``: with the extensions' effects turned to noise;
    ``record_ops``: recording the aten ops it dispatches, for the pure policy)."""

    op: ClassVar[Op] = Op.TRIAL
    index: int
    noop: bool = False
    record_ops: bool = False

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {"index": self.index, "noop": self.noop, "record_ops": self.record_ops})

    @classmethod
    def from_dict(cls, data: object) -> TrialRequest:
        r = Reader(data, "the trial request")
        return cls(index=r.integer("index"), noop=r.flag("noop", False), record_ops=r.flag("record_ops", False))


@dataclass(frozen=True, kw_only=True)
class TrialReply:
    """A trial's output (its description, for the comparer), the in-process checks' flags,
    when recorded the aten ops forward dispatched, and what its extension functions raised."""

    output: JsonValue
    flags: tuple[str, ...] = ()
    ops: tuple[str, ...] | None = None
    #: What its extension functions raised while forward went on (`vocabulary.causes`).
    kernel_errors: tuple[KernelError, ...] = ()
    #: The guarded harness objects the candidate's code changed (`harness.sandboxed.meter.Meter.tampered`).
    tampered: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        reply: JsonObject = {"output": self.output, "flags": list(self.flags), "tampered": list(self.tampered)}
        if self.ops is not None:
            reply["ops"] = list(self.ops)
        if self.kernel_errors:
            reply["kernel_errors"] = [e.to_dict() for e in self.kernel_errors]
        return reply

    @classmethod
    def read(cls, r: Reader) -> TrialReply:
        return cls(output=r.json("output", optional=True), flags=tuple(r.texts("flags", optional=True)),
                   ops=tuple(r.texts("ops")) if r.has("ops") else None,
                   kernel_errors=tuple(r.items_of("kernel_errors", KernelError.from_dict, optional=True)),
                   tampered=tuple(r.texts("tampered", optional=True)))


@dataclass(frozen=True)
class ProfileRequest:
    """Per-kernel totals over a few calls, from the torch profiler."""

    op: ClassVar[Op] = Op.PROFILE

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {})


@dataclass(frozen=True, kw_only=True)
class ProfileReply:
    kernels: tuple[ProfileRow, ...]

    def to_dict(self) -> JsonObject:
        return {"kernels": [row.to_dict() for row in self.kernels]}

    @classmethod
    def read(cls, r: Reader) -> ProfileReply:
        return cls(kernels=tuple(r.items_of("kernels", ProfileRow.from_dict)))


@dataclass(frozen=True, kw_only=True)
class TimeRequest:
    """Time the candidate in its metered loop over the trials ``sets`` (answered by
    `harness.protocol.meter.Metering`, then frames, then `MeterEnd`)."""

    op: ClassVar[Op] = Op.TIME
    sets: tuple[int, ...]
    flush: bool

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {"sets": list(self.sets), "flush": self.flush})

    @classmethod
    def from_dict(cls, data: object) -> TimeRequest:
        r = Reader(data, "the timing request")
        return cls(sets=tuple(r.integers("sets")), flush=r.flag("flush"))
