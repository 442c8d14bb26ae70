"""The job events' payloads, typed: what each event of ``GET /jobs/{id}/events`` carries.

Frozen dataclasses: the store and the worker build them, `append_event` takes their ``to_dict()``
(JSON only at the column and on the wire), the API documents their schemas (pydantic's
``TypeAdapter`` of each) and a client reads an event back with `parse_payload`.

`JsonField` is `harness.wire.JsonValue` as a named recursive alias (``typing_extensions``), the
form pydantic can check and document: a free-form JSON part of a payload or an API response.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar, Self

from typing_extensions import TypeAliasType

from harness.wire import JsonObject, JsonValue

__all__ = [
    "EVENT_PAYLOADS",
    "AttemptPayload",
    "CancelRequestedPayload",
    "EventPayload",
    "JsonField",
    "MessagePayload",
    "ProgressPayload",
    "StatePayload",
    "TrajectoryPayload",
    "parse_payload",
]

#: A JSON value (`harness.wire.JsonValue`) in a form pydantic can check and document.
JsonField = TypeAliasType(
    "JsonField", "bool | int | float | str | Sequence[JsonField] | Mapping[str, JsonField] | None"
)


@dataclass(frozen=True, kw_only=True)
class _Payload:
    #: Fields left out of the JSON when they are empty (the stream has always omitted them).
    OMIT_IF_EMPTY: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> JsonObject:
        return {k: v for k, v in asdict(self).items() if not (k in self.OMIT_IF_EMPTY and not v)}

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Self:
        """The payload of parsed JSON; a missing required field is a TypeError (field types are
        not checked: the store wrote them)."""
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
class AttemptPayload(_Payload):
    """``attempt``: an evaluated candidate was stored (``best``: it is the job's best now)."""

    n: int
    attempt_id: int
    trajectory_id: int | None
    tool: str
    status: str
    stage: str
    correct: bool
    median_ms: float | None
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    pct_of_sol: float | None
    best: bool
    #: ``candidate``, ``infra``, ``problem`` or ``cancelled`` (cut short by the job's stop) for an
    #: error; ``None`` otherwise.
    error_kind: str | None = None
    #: The baselines the speedups are ratios of: eager PyTorch's and torch.compile's median
    #: milliseconds (``None`` when not timed).
    eager_ms: float | None = None
    compile_ms: float | None = None


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
    details: Mapping[str, JsonField] = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        return {"phase": self.phase, **self.details}

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> Self:
        return cls(phase=str(data.get("phase", "")), details={k: v for k, v in data.items() if k != "phase"})


EventPayload = (StatePayload | CancelRequestedPayload | AttemptPayload | TrajectoryPayload | MessagePayload
                | ProgressPayload)

#: The payload type of each event type (``end`` and any newer type have none here).
EVENT_PAYLOADS: dict[str, type[EventPayload]] = {
    "state": StatePayload,
    "cancel_requested": CancelRequestedPayload,
    "attempt": AttemptPayload,
    "trajectory": TrajectoryPayload,
    "message": MessagePayload,
    "progress": ProgressPayload,
}


def parse_payload(event_type: str, data: JsonValue) -> EventPayload | None:
    """An event's payload as its dataclass, or None (an event type this version does not know, or
    data that is not an object of that shape)."""
    payload_type = EVENT_PAYLOADS.get(event_type)
    if payload_type is None or not isinstance(data, dict):
        return None
    try:
        return payload_type.from_dict(data)
    except TypeError:  # a required field is missing
        return None
