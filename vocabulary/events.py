"""A job's events: one enum for their types, and one typed payload for each.

Who appends each:

- the store, in the same transaction as the change: ``state`` (`StatePayload`), ``cancel_requested``
  (`CancelRequestedPayload`), ``attempt`` (`AttemptPayload`);
- the worker (`worker.recorder`): ``trajectory`` (`TrajectoryPayload`), ``message``
  (`MessagePayload`), ``progress`` (`ProgressPayload`) and ``stage`` (`StagePayload`: the
  referee's stages, with the time the worker heard of each);
- the API's stream only, never stored: ``end``, after the job's last event once it is final.

Frozen dataclasses: the store and the worker build them, the event's row takes their ``to_dict()``
(JSON only at the column and on the wire), the API documents their schemas and a client reads an
event back with `parse_payload`. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import ClassVar, Self, cast

from vocabulary.figures import AttemptFigures
from vocabulary.stages import StageEvent
from vocabulary.wire import JsonObject, JsonValue, Reader, WireError

__all__ = [
    "EVENT_PAYLOADS",
    "AttemptPayload",
    "CancelRequestedPayload",
    "EventPayload",
    "EventType",
    "MessagePayload",
    "ProgressPayload",
    "StagePayload",
    "StatePayload",
    "TrajectoryPayload",
    "parse_payload",
]


class EventType(StrEnum):
    """A job event's type: the store's ``job_events.type`` column and the stream's ``event:`` line."""

    STATE = "state"
    CANCEL_REQUESTED = "cancel_requested"
    ATTEMPT = "attempt"
    TRAJECTORY = "trajectory"
    MESSAGE = "message"
    PROGRESS = "progress"
    STAGE = "stage"
    END = "end"


@dataclass(frozen=True, kw_only=True)
class _Payload:
    #: Fields left out of the JSON when they are empty (the stream has always omitted them).
    OMIT_IF_EMPTY: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> JsonObject:
        return {k: v for k, v in asdict(self).items() if not (k in self.OMIT_IF_EMPTY and not v)}

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """The payload of parsed JSON; a missing required field is a TypeError (field types are
        not checked: the store wrote them)."""
        if not isinstance(data, Mapping):
            raise WireError(f"a {cls.__name__} is a JSON object")
        known = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        return cls(**known)


@dataclass(frozen=True, kw_only=True)
class StatePayload(_Payload):
    """``state``: the job moved from ``previous`` to ``state`` (the first has no ``previous``)."""

    OMIT_IF_EMPTY: ClassVar[frozenset[str]] = frozenset({"previous", "reason", "error", "worker_id"})

    state: str
    previous: str | None = None
    reason: str | None = None
    error: str | None = None
    worker_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class CancelRequestedPayload(_Payload):
    """``cancel_requested``: the owner asked to cancel a running job (its worker stops soon)."""


@dataclass(frozen=True, kw_only=True)
class AttemptPayload(_Payload, AttemptFigures):
    """``attempt``: an evaluated candidate was stored (``best``: it is the job's best now); its
    figures (`AttemptFigures`) and the baselines its speedups are ratios of, flat in the JSON."""

    #: The attempt's number within its job (``/jobs/{id}/attempts/{n}``).
    n: int
    attempt_id: int
    trajectory_id: int | None
    tool: str
    best: bool
    #: Eager PyTorch's and torch.compile's median milliseconds (``None`` when not timed).
    eager_ms: float | None = None
    compile_ms: float | None = None

    def to_dict(self) -> JsonObject:
        return {"n": self.n, "attempt_id": self.attempt_id, "trajectory_id": self.trajectory_id, "tool": self.tool,
                **AttemptFigures.to_dict(self), "best": self.best, "eager_ms": self.eager_ms,
                "compile_ms": self.compile_ms}

    @classmethod
    def from_dict(cls, data: object) -> Self:
        r = Reader(data, "an attempt event")
        figures = AttemptFigures.from_dict(data)
        return cls(**vars(figures), n=r.integer("n"), attempt_id=r.integer("attempt_id"),
                   trajectory_id=r.optional_integer("trajectory_id"), tool=r.text("tool"), best=r.flag("best", False),
                   eager_ms=r.optional_number("eager_ms"), compile_ms=r.optional_number("compile_ms"))


@dataclass(frozen=True, kw_only=True)
class TrajectoryPayload(_Payload):
    """``trajectory``: a trajectory started (``temperature``, ``strategy``) or ended (``reason``)."""

    OMIT_IF_EMPTY: ClassVar[frozenset[str]] = frozenset({"temperature", "strategy", "reason"})

    index: int
    trajectory_id: int
    state: str
    temperature: float | None = None
    strategy: str | None = None
    reason: str | None = None

    def to_dict(self) -> JsonObject:
        data = super().to_dict()
        if "reason" not in data:  # a start: its temperature and strategy, even when unset
            data.update(temperature=self.temperature, strategy=self.strategy)
        return data


@dataclass(frozen=True, kw_only=True)
class MessagePayload(_Payload):
    """``message``: a chat message was stored (its content's first characters in ``preview``)."""

    #: The trajectory's index (`TrajectoryPayload.index`; a ``trajectory_index`` elsewhere): the
    #: stream's field, and stored events', keeps its first name.
    trajectory: int
    trajectory_id: int
    message_id: int
    seq: int
    role: str
    tool_calls: list[str]
    tool_call_id: str | None
    tokens_in: int
    tokens_out: int
    tokens_reasoning: int | None
    tokens_cached: int | None
    latency_ms: float | None
    cost_usd: float
    preview: str


@dataclass(frozen=True, kw_only=True)
class ProgressPayload(_Payload):
    """``progress``: a milestone of the worker (``phase``) with its details, flattened in the JSON."""

    phase: str
    #: Free-form JSON values by name.
    details: Mapping[str, object] = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        return {"phase": self.phase, **cast("JsonObject", self.details)}

    @classmethod
    def from_dict(cls, data: object) -> Self:
        r = Reader(data, "a progress event")
        return cls(phase=r.text("phase", ""), details={k: v for k, v in r.data.items() if k != "phase"})



@dataclass(frozen=True)
class StagePayload(StageEvent):
    """``stage``: one of the referee's stages started or finished (`StageEvent`), and when the
    worker heard of it (ISO 8601, UTC)."""

    at: str | None = None

    def to_dict(self) -> JsonObject:
        return {**super().to_dict(), "at": self.at}

    @classmethod
    def from_dict(cls, data: object) -> StagePayload:
        event = StageEvent.from_dict(data)
        return cls(event.stage, event.phase, event.seconds, at=Reader(data, "a stage event").optional_text("at"))


EventPayload = (StatePayload | CancelRequestedPayload | AttemptPayload | TrajectoryPayload | MessagePayload
                | ProgressPayload | StagePayload)

#: The payload type of each event type (``end`` carries none).
EVENT_PAYLOADS: dict[EventType, type[EventPayload]] = {
    EventType.STATE: StatePayload,
    EventType.CANCEL_REQUESTED: CancelRequestedPayload,
    EventType.ATTEMPT: AttemptPayload,
    EventType.TRAJECTORY: TrajectoryPayload,
    EventType.MESSAGE: MessagePayload,
    EventType.PROGRESS: ProgressPayload,
    EventType.STAGE: StagePayload,
}


def parse_payload(event_type: str, data: JsonValue) -> EventPayload | None:
    """An event's payload as its dataclass, or None (an event type this version does not know, or
    data that is not an object of that shape)."""
    try:
        payload_type = EVENT_PAYLOADS.get(EventType(event_type))
    except ValueError:
        return None
    if payload_type is None or not isinstance(data, dict):
        return None
    try:
        return payload_type.from_dict(data)
    except (TypeError, WireError):  # a required field missing, or one of the wrong type
        return None
