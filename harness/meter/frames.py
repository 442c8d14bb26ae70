"""The metered loop's binary frames (`kl_meter.c` is the other side), as typed values.

Native byte order: both ends run on one machine. Standard library only.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag

from vocabulary.wire import JsonObject, WireError

__all__ = ["AuditFrame", "DoneFrame", "DoneStatus", "GoFlags", "go_frame", "read_reply_frame"]

_GO = struct.Struct("=4sIQQQQII")
_DONE = struct.Struct("=4sIQQd")
_AUDIT = struct.Struct("=4sIQQ")
#: A DONE frame's message is at most this long (the loop cuts it at 4000 bytes).
_MAX_MESSAGE = 4096
#: An AUDIT frame's description (the loop's buffer is 16 KiB).
_MAX_DESCRIPTION = 16384


class GoFlags(IntFlag):
    """What a GO frame asks."""

    CALL = 0
    #: Export the last call's captured output (no call).
    AUDIT = 1
    #: End the loop.
    STOP = 2
    #: Seed the forward's generators first (a RANDOM problem's call).
    SEED_FORWARD = 4


class DoneStatus(IntEnum):
    """How a call ended, as the loop saw it."""

    OK = 0
    FORWARD_RAISED = 1
    #: Not a plain tensor (a subclass, a proxy, a lazy object), or one that cannot be copied.
    BAD_OUTPUT = 2
    #: A reduced-precision switch was on after the call.
    TF32 = 3
    INTERNAL = 4
    BAD_FRAME = 5


def go_frame(flags: GoFlags, *, call: int = 0, input_seed: int = 0, forward_seed: int = 0, nonce: int = 0,
             input_set: int = 0) -> bytes:
    return _GO.pack(b"KLGO", int(flags), call, input_seed, forward_seed, nonce, input_set, 0)


@dataclass(frozen=True)
class DoneFrame:
    status: DoneStatus
    call: int
    nonce: int
    sample_ms: float
    message: str = ""


@dataclass(frozen=True)
class AuditFrame:
    """An audited call's captured output: ``description`` says its tensors (dtype, shape) and
    whether forward returned one; the bytes are in the memfd that came with the frame."""

    call: int
    nbytes: int
    description: JsonObject


def read_reply_frame(payload: bytes) -> DoneFrame | AuditFrame:
    """A DONE or AUDIT frame from the sandbox; `WireError` for anything else."""
    magic = payload[:4]
    if magic == b"KLDN" and _DONE.size <= len(payload) <= _DONE.size + _MAX_MESSAGE:
        _, status, call, nonce, sample = _DONE.unpack_from(payload)
        try:
            kind = DoneStatus(status)
        except ValueError:
            raise WireError(f"a DONE frame with status {status}") from None
        text = payload[_DONE.size:].decode("utf-8", "replace")
        return DoneFrame(kind, call, nonce, sample, text)
    if magic == b"KLAU" and _AUDIT.size <= len(payload) <= _AUDIT.size + _MAX_DESCRIPTION:
        _, _, call, nbytes = _AUDIT.unpack_from(payload)
        try:
            description = json.loads(payload[_AUDIT.size:])
        except ValueError:
            raise WireError("an AUDIT frame with a malformed description") from None
        if not isinstance(description, dict):
            raise WireError("an AUDIT frame with a malformed description")
        return AuditFrame(call, nbytes, description)
    raise WireError(f"a frame of {len(payload)} bytes that is neither DONE nor AUDIT")
