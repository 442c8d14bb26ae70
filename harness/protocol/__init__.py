"""The sandbox protocol: the messages between the referee and its reference and candidate sandboxes.

Every message names its `Op`; a request is a frozen dataclass the driver sends (``to_dict()``),
the sandbox reads it back with ``from_dict()``; a reply goes the other way and is read where it
enters, through `vocabulary.wire.Reader`: a malformed reply from an untrusted sandbox is a
`WireError`, which the referee turns into the candidate's fault. A request the sandbox could not
carry out (the candidate's forward raised, the problem's code did) is answered by `OpFailed`;
`read_reply` tells the two apart. Standard library only: both sides import it.

The conversations (``→`` request, ``←`` reply):

- reference (`harness.sandboxed.roles.reference`): → `ReferenceStart` ← `ReferenceInfo` | `StartFailed`;
  then → `MeterRequest` ← `Metering`, the metered loop's frames, ← `MeterEnd`; → `CompareRequest`
  (with the audited outputs' memfds) ← `CompareReply` (each or `OpFailed`), until → `Exit`.
- candidate (`harness.sandboxed.roles.candidate`): ← `Ready`; → `CandidateLoad` ← `Loaded` | `StartFailed`;
  then → `TrialRequest` ← `TrialReply`, → `ProfileRequest` ← `ProfileReply`, → `TimeRequest`
  ← `Metering`, the metered loop's frames (`harness.meter.drive`), ← `MeterEnd` (each or
  `OpFailed`), until → `Exit`. While it loads and runs its trials, before its reply:
  ← `Delegation` (a lazy build, in ``__init__`` or a forward) → `BuildAnswer`, as often as it
  builds.
- compile (`harness.sandboxed.roles.compile`): ← `Ready`; → `CompileRequest`; ← `Delegation` (a build for
  the trusted builder) → `BuildAnswer`, as often as it builds; ← `CompileReply`. A builder:
  ← `Ready`; → `BuilderBuild` ← `BuildAnswer`, until the channel closes.
- admission (`harness.sandboxed.roles.admission`): → `AdmitRequest` ← `AdmissionReply` | `StartFailed`,
  or → `MeasureRequest` ← `MeasureReply` | `StartFailed`.
- model (`harness.sandboxed.roles.model`): → `ProfileModelRequest` ← `ProfileModelReply` | `StartFailed`.

One module per conversation: `.reference`, `.candidate`, `.build`, `.admission`, `.model`; `.meter`
the metered loop's JSON edges; this one holds what they share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, TypeVar

from harness.seeds import TrialSpec
from problems.spec import Problem
from vocabulary.wire import JsonObject, Reader, WireError

__all__ = [
    "Exit",
    "Op",
    "OpFailed",
    "Ready",
    "StartFailed",
    "op_of",
    "read_reply",
    "request_problem",
    "request_trials",
    "tagged",
]

R = TypeVar("R")


class Op(StrEnum):
    """What a message asks for (or, from a sandbox, what it says: `READY`, `DELEGATE`)."""

    READY = "ready"
    START = "start"
    LOAD = "load"
    TRIAL = "trial"
    PROFILE = "profile"
    TIME = "time"
    METER = "meter"
    COMPARE = "compare"
    COMPILE = "compile"
    DELEGATE = "delegate"
    BUILD = "build"
    ADMIT = "admit"
    MEASURE = "measure"
    PROFILE_MODEL = "profile_model"
    DEVICE = "device"
    EXIT = "exit"


def op_of(message: JsonObject) -> Op | None:
    """The `Op` a message names; None for none or one this version does not know."""
    value = message.get("op")
    try:
        return Op(value) if isinstance(value, str) else None
    except ValueError:
        return None


def tagged(op: Op, body: JsonObject) -> JsonObject:
    """A message's JSON: its op, then its fields."""
    return {"op": op.value, **body}


def request_problem(r: Reader) -> Problem:
    """The problem a request carries (parsed again from its source: its declarations with it)."""
    return Problem.from_dict(dict(r.nested("problem").data))


def request_trials(r: Reader) -> tuple[TrialSpec, ...]:
    return tuple(r.items_of("trials", TrialSpec.from_dict))


@dataclass(frozen=True)
class OpFailed:
    """A request the sandbox could not carry out: what its code (or the problem's, or the
    candidate's) raised, briefly (`harness.sandboxed.roles.loading.brief_error`)."""

    error: str

    def to_dict(self) -> JsonObject:
        return {"error": self.error}


def read_reply(raw: JsonObject, read: Callable[[Reader], R], what: str) -> R | OpFailed:
    """``raw`` as `OpFailed` if it carries an ``error``, else as ``read`` makes it.

    Raises:
        WireError: ``raw`` is not the reply ``read`` expects (named ``what``).
    """
    if "error" in raw:
        return OpFailed(error=str(raw["error"]))
    try:
        return read(Reader(raw, what))
    except WireError:
        raise
    except (TypeError, ValueError, KeyError) as exc:  # a nested from_dict's own check
        raise WireError(f"{what} is malformed ({exc})") from None


@dataclass(frozen=True)
class Ready:
    """A sandbox's first message: its start-up (interpreter, torch, a CUDA context) is done."""

    op: ClassVar[Op] = Op.READY

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {})

    @classmethod
    def is_ready(cls, raw: JsonObject) -> bool:
        return op_of(raw) is Op.READY


@dataclass(frozen=True)
class Exit:
    """Asks a sandbox to finish (it returns from its loop; its tree dies with its warden)."""

    op: ClassVar[Op] = Op.EXIT

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {})


@dataclass(frozen=True, kw_only=True)
class StartFailed:
    """A sandbox that could not start its work: the problem's code or the candidate failed to load."""

    message: str
    errors: str = ""

    def to_dict(self) -> JsonObject:
        return {"ok": False, "message": self.message, "errors": self.errors}

    @classmethod
    def read(cls, r: Reader) -> StartFailed:
        return cls(message=r.text("message", ""), errors=r.text("errors", ""))
