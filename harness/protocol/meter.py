"""The metered loop's JSON edges, shared by the candidate and reference conversations.

A sandbox asked to time something answers `Metering` once its loop waits for GO frames
(`harness.meter.drive` takes over the channel with binary frames until its STOP frame), then
`MeterEnd` when the loop ended (or `OpFailed`, when its preparation or our loop failed).
Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.wire import JsonObject, Reader

__all__ = ["CallInputs", "MeterEnd", "Metering"]


@dataclass(frozen=True)
class Metering:
    """The sandbox's loop waits for GO frames."""

    def to_dict(self) -> JsonObject:
        return {"metering": True}

    @staticmethod
    def is_metering(raw: JsonObject) -> bool:
        return raw.get("metering") is True


@dataclass(frozen=True, kw_only=True)
class MeterEnd:
    """The loop ended: the calls it made, the in-process checks' flags, and the guarded harness
    objects found changed (`harness.sandboxed.meter.Meter.tampered`)."""

    calls: int
    flags: tuple[str, ...] = ()
    tampered: tuple[str, ...] = ()

    def to_dict(self) -> JsonObject:
        return {"calls": self.calls, "flags": list(self.flags), "tampered": list(self.tampered)}

    @classmethod
    def read(cls, r: Reader) -> MeterEnd:
        return cls(calls=r.integer("calls"), flags=tuple(r.texts("flags", optional=True)),
                   tampered=tuple(r.texts("tampered", optional=True)))


@dataclass(frozen=True, kw_only=True)
class CallInputs:
    """How an audited call's inputs differ from its input set's: the seeds of its GO frame."""

    input_seed: int
    forward_seed: int

    def to_dict(self) -> JsonObject:
        return {"input_seed": self.input_seed, "forward_seed": self.forward_seed}

    @classmethod
    def from_dict(cls, data: object) -> CallInputs:
        r = Reader(data, "an audited call's seeds")
        return cls(input_seed=r.integer("input_seed"), forward_seed=r.integer("forward_seed"))
