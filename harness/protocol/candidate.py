"""The candidate stage's conversation: its load, the trials, the profile and the timing loop.

The candidate stage (`harness.roles.candidate`) runs the candidate's code: every reply is read
where it enters, through `harness.wire.Reader`, and a malformed one is the candidate's fault
(`harness.candidaterun`). Its requests carry derived seeds only, never the job's secret nor an
expected output. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from harness.options import Target, TimingOptions
from harness.protocol import Op, StartFailed, request_problem, request_trials, tagged
from harness.protocol.reference import CompareItem
from harness.seeds import TrialSpec
from harness.verdict import ProfileRow, Timing
from harness.wire import JsonObject, JsonValue, Reader
from problems.spec import Problem

__all__ = ["CandidateLoad", "KeptOutput", "Loaded", "ProfileReply", "ProfileRequest", "TimeReply", "TimeRequest",
           "TrialReply", "TrialRequest"]


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
    arch_list: str
    transport: str
    init_seed: int
    weights_seed: int
    trials: tuple[TrialSpec, ...]

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {
            "workdir": str(self.workdir), "problem": self.problem.to_dict(), "target": self.target.value,
            "candidate_path": str(self.candidate_path), "builds_dir": str(self.builds_dir),
            "arch_list": self.arch_list, "transport": self.transport, "init_seed": self.init_seed,
            "weights_seed": self.weights_seed, "trials": [t.to_dict() for t in self.trials]})

    @classmethod
    def from_dict(cls, data: object) -> CandidateLoad:
        r = Reader(data, "the candidate's load request")
        return cls(workdir=Path(r.text("workdir")), problem=request_problem(r), target=Target(r.text("target")),
                   candidate_path=Path(r.text("candidate_path")), builds_dir=Path(r.text("builds_dir")),
                   arch_list=r.text("arch_list"), transport=r.text("transport", "file"),
                   init_seed=r.integer("init_seed"), weights_seed=r.integer("weights_seed"), trials=request_trials(r))


@dataclass(frozen=True, kw_only=True)
class Loaded:
    """The candidate is loaded; ``extensions``: the modules of its own builds it imported."""

    extensions: tuple[str, ...]

    def to_dict(self) -> JsonObject:
        return {"ok": True, "extensions": list(self.extensions)}

    @classmethod
    def from_reply(cls, raw: JsonObject) -> Loaded | StartFailed:
        r = Reader(raw, "the candidate's load reply")
        if not r.flag("ok"):
            return StartFailed.read(r)
        return cls(extensions=tuple(r.texts("extensions", optional=True)))


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
    """A trial's output (its description, for the comparer), the in-process checks' flags and,
    when recorded, the aten ops forward dispatched."""

    output: JsonValue
    flags: tuple[str, ...] = ()
    ops: tuple[str, ...] | None = None

    def to_dict(self) -> JsonObject:
        reply: JsonObject = {"output": self.output, "flags": list(self.flags)}
        if self.ops is not None:
            reply["ops"] = list(self.ops)
        return reply

    @classmethod
    def read(cls, r: Reader) -> TrialReply:
        return cls(output=r.json("output", optional=True), flags=tuple(r.texts("flags", optional=True)),
                   ops=tuple(r.texts("ops")) if r.has("ops") else None)


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
    """The timing loop over input ``sets``; call ids start at ``first_call`` (a second hardened
    run continues them, so no input repeats)."""

    op: ClassVar[Op] = Op.TIME
    timing: TimingOptions
    sets: tuple[int, ...]
    first_call: int = 0

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {"timing": self.timing.to_dict(), "sets": list(self.sets),
                                  "first_call": self.first_call})

    @classmethod
    def from_dict(cls, data: object) -> TimeRequest:
        r = Reader(data, "the timing request")
        return cls(timing=TimingOptions.from_dict(r.data.get("timing")), sets=tuple(r.integers("sets")),
                   first_call=r.integer("first_call", 0))


@dataclass(frozen=True, kw_only=True)
class KeptOutput:
    """A re-checked timed call's output: input set ``index``, call id ``call``."""

    index: int
    call: int
    output: JsonObject

    def to_dict(self) -> JsonObject:
        return {"index": self.index, "call": self.call, "output": self.output}

    @classmethod
    def from_dict(cls, data: object) -> KeptOutput:
        r = Reader(data, "a kept output")
        return cls(index=r.integer("index"), call=r.integer("call"), output=r.object("output"))

    def to_compare(self) -> CompareItem:
        return CompareItem(index=self.index, output=self.output, call=self.call)


@dataclass(frozen=True, kw_only=True)
class TimeReply:
    """The candidate's samples (its own clock: bounded by ours), its re-checked outputs and flags."""

    timing: Timing
    kept: tuple[KeptOutput, ...]
    wall_s: float = 0.0
    flags: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return {"timing": self.timing.to_dict(), "kept": [k.to_dict() for k in self.kept], "wall_s": self.wall_s,
                "flags": list(self.flags)}

    @classmethod
    def read(cls, r: Reader) -> TimeReply:
        return cls(timing=Timing.from_dict(r.data.get("timing")), kept=tuple(r.items_of("kept", KeptOutput.from_dict)),
                   wall_s=r.number("wall_s", 0.0), flags=tuple(r.texts("flags", optional=True)))
