"""The model sandbox's conversation: profile a user's model (capture, regions, timing).

The model sandbox (`harness.sandboxed.roles.model`) runs the user's model file, as untrusted as a problem: its
reply is read through `vocabulary.wire.Reader` (`harness.modelsandbox`). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from harness.options import TimingOptions
from harness.protocol import Op, StartFailed, request_problem, tagged
from problems.spec import Problem
from vocabulary.evaluation import Target
from vocabulary.regionplan import ModelProfile
from vocabulary.wire import JsonObject, Reader

__all__ = ["ProfileModelReply", "ProfileModelRequest"]


@dataclass(frozen=True, kw_only=True)
class ProfileModelRequest:
    """Capture the model, find its regions, time them on the target, write each as a problem."""

    op: ClassVar[Op] = Op.PROFILE_MODEL
    problem: Problem
    target: Target
    init_seed: int
    input_seed: int
    #: Also time ``torch.compile`` of the model and of each region (an inductor build each).
    compile_gains: bool
    #: Model calls the profiler records (after warm-up).
    profile_calls: int
    timing: TimingOptions

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {
            "problem": self.problem.to_dict(), "target": self.target.value, "init_seed": self.init_seed,
            "input_seed": self.input_seed, "compile_gains": self.compile_gains, "profile_calls": self.profile_calls,
            "timing": self.timing.to_dict()})

    @classmethod
    def from_dict(cls, data: object) -> ProfileModelRequest:
        r = Reader(data, "the model profile request")
        return cls(problem=request_problem(r), target=Target(r.text("target")), init_seed=r.integer("init_seed"),
                   input_seed=r.integer("input_seed"), compile_gains=r.flag("compile_gains"),
                   profile_calls=r.integer("profile_calls"), timing=TimingOptions.from_dict(r.object("timing")))


@dataclass(frozen=True, kw_only=True)
class ProfileModelReply:
    profile: ModelProfile

    def to_dict(self) -> JsonObject:
        return {"ok": True, "profile": self.profile.to_dict()}

    @classmethod
    def from_reply(cls, raw: JsonObject) -> ProfileModelReply | StartFailed:
        r = Reader(raw, "the model profile reply")
        if not r.flag("ok", False):
            return StartFailed.read(r)
        return cls(profile=ModelProfile.from_dict(r.object("profile")))
