"""The private channel between the referee and a stage process: length-prefixed JSON messages.

One connected socket pair per stage (`harness.sandbox.StageProcess` makes it; the stage's end
arrives as a file descriptor, `harness.roles`). What travels is a `StageMessage` (a request or reply
of `harness.protocol`) as its ``to_dict()``; what arrives is a `JsonObject` for the receiver to
read with the matching ``from_dict()``. The trusted side caps a message's size, and anything that
is not a JSON object is `ChannelClosed`: a stage cannot make the referee allocate without bound
or raise where it does not expect it. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import time
from typing import Protocol

from harness.wire import JsonObject

__all__ = ["MAX_MESSAGE_BYTES", "Channel", "ChannelClosed", "ChannelTimeout", "StageMessage"]

#: The trusted side refuses larger messages: a candidate cannot make it allocate without bound.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class ChannelClosed(ConnectionError):
    """The other side closed the channel (it exited or crashed), or sent what is not a message."""


class ChannelTimeout(TimeoutError):
    """No message within the stage's time limit."""


class StageMessage(Protocol):
    """A request or reply of `harness.protocol`: anything that becomes one JSON object."""

    def to_dict(self) -> JsonObject: ...


class Channel:
    """Length-prefixed JSON messages over a connected socket."""

    def __init__(self, sock: socket.socket, *, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._sock = sock
        self._max = max_bytes

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        return cls(socket.socket(fileno=fd))

    def send(self, message: StageMessage) -> None:
        data = json.dumps(message.to_dict(), allow_nan=True).encode()
        try:
            self._sock.sendall(struct.pack(">I", len(data)) + data)
        except OSError as exc:  # the stage died, or a cancel closed the channel first
            raise ChannelClosed(str(exc)) from None

    def _read_exact(self, size: int, deadline: float | None) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ChannelTimeout("no reply in time")
                self._sock.settimeout(remaining)
            else:
                self._sock.settimeout(None)
            try:
                chunk = self._sock.recv(min(1 << 20, size - len(chunks)))
            except TimeoutError:
                raise ChannelTimeout("no reply in time") from None
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if not chunk:
                raise ChannelClosed("the other side closed the channel")
            chunks += chunk
        return bytes(chunks)

    def recv(self, timeout: float | None = None) -> JsonObject:
        deadline = None if timeout is None else time.monotonic() + timeout
        (size,) = struct.unpack(">I", self._read_exact(4, deadline))
        if size > self._max:
            raise ChannelClosed(f"message of {size} bytes exceeds the {self._max}-byte limit")
        try:
            message = json.loads(self._read_exact(size, deadline))
        except ValueError:  # not JSON (nor UTF-8): as malformed as a message can be
            raise ChannelClosed("malformed message") from None
        if not isinstance(message, dict):
            raise ChannelClosed("malformed message")
        return message

    def close(self) -> None:
        # shutdown first: it wakes a thread blocked in recv on this socket (close alone does not).
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
