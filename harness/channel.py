"""The private channel between the referee and a sandbox: length-prefixed JSON messages.

One connected socket pair per sandbox (`harness.sandbox.SandboxProcess` makes it; the sandbox's end
arrives as a file descriptor, `harness.sandboxed.roles`). What travels is a `SandboxMessage` (a request or reply
of `harness.protocol`) as its ``to_dict()``; what arrives is a `JsonObject` for the receiver to
read with the matching ``from_dict()``. The trusted side caps a message's size, and anything that
is not a JSON object is `ChannelClosed`: a sandbox cannot make the referee allocate without bound
or raise where it does not expect it. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import Protocol

from vocabulary.wire import JsonObject

__all__ = [
    "MAX_FRAME_FDS", "MAX_MESSAGE_BYTES", "Channel", "ChannelClosed", "ChannelTimeout", "Frame", "SandboxMessage",
    "parse_message",
]

#: The trusted side refuses larger messages: a candidate cannot make it allocate without bound.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: File descriptors a frame may carry: a metered call's audit is one memfd (from a sandbox); a compare
#: request carries one per audited output (to the reference, from the trusted side).
MAX_FRAME_FDS = 256


class ChannelClosed(ConnectionError):
    """The other side closed the channel (it exited or crashed), or sent what is not a message."""


class ChannelTimeout(TimeoutError):
    """No message within the sandbox's time limit."""


class SandboxMessage(Protocol):
    """A request or reply of `harness.protocol`: anything that becomes one JSON object."""

    def to_dict(self) -> JsonObject: ...


@dataclass(frozen=True)
class Frame:
    """One raw frame: its payload, and the file descriptors that arrived with it (the receiver's
    to close)."""

    payload: bytes
    fds: tuple[int, ...] = ()

    def close_fds(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


class Channel:
    """Length-prefixed JSON messages over a connected socket; raw frames (with file descriptors)
    beside them for the metered timing loop (`harness.meter`)."""

    def __init__(self, sock: socket.socket, *, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._sock = sock
        self._max = max_bytes

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        return cls(socket.socket(fileno=fd))

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, message: SandboxMessage, *, fds: tuple[int, ...] = ()) -> None:
        self.send_frame(json.dumps(message.to_dict(), allow_nan=True).encode(), fds=fds)

    def send_frame(self, payload: bytes, *, fds: tuple[int, ...] = ()) -> None:
        """One raw frame; ``fds`` ride with its length prefix (SCM_RIGHTS)."""
        prefix = struct.pack(">I", len(payload))
        try:
            self._sock.settimeout(None)
            if fds:
                sent = socket.send_fds(self._sock, [prefix], list(fds))
                self._sock.sendall(prefix[sent:] + payload)
            else:
                self._sock.sendall(prefix + payload)
        except OSError as exc:  # the sandbox died, or a cancel closed the channel first
            raise ChannelClosed(str(exc)) from None

    def _read_exact(self, size: int, deadline: float | None) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            self._settimeout(deadline)
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

    def _read_prefix(self, deadline: float | None) -> tuple[bytes, tuple[int, ...]]:
        """The 4-byte length prefix and the descriptors that came with it."""
        head = bytearray()
        fds: list[int] = []
        while len(head) < 4:
            try:
                self._settimeout(deadline)
                data, got, flags, _ = socket.recv_fds(self._sock, 4 - len(head), MAX_FRAME_FDS)
            except (ChannelTimeout, ChannelClosed):
                _close_all(fds)
                raise
            except TimeoutError:
                _close_all(fds)
                raise ChannelTimeout("no reply in time") from None
            except OSError as exc:
                _close_all(fds)
                raise ChannelClosed(str(exc)) from None
            fds.extend(got)
            if flags & socket.MSG_CTRUNC:
                _close_all(fds)
                raise ChannelClosed("a frame carried too many file descriptors")
            if not data:
                _close_all(fds)
                raise ChannelClosed("the other side closed the channel")
            head += data
        return bytes(head), tuple(fds)

    def _settimeout(self, deadline: float | None) -> None:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise ChannelTimeout("no reply in time")
        try:
            self._sock.settimeout(remaining)
        except OSError as exc:  # EBADF: a cancel closed the channel under this thread
            raise ChannelClosed(str(exc)) from None

    def recv_frame(self, timeout: float | None = None, *, max_bytes: int | None = None) -> Frame:
        """One raw frame (JSON or not), with the descriptors that came with it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        head, fds = self._read_prefix(deadline)
        (size,) = struct.unpack(">I", head)
        limit = self._max if max_bytes is None else max_bytes
        try:
            if size > limit:
                raise ChannelClosed(f"message of {size} bytes exceeds the {limit}-byte limit")
            return Frame(self._read_exact(size, deadline), fds)
        except BaseException:
            _close_all(list(fds))
            raise

    def recv(self, timeout: float | None = None) -> JsonObject:
        frame = self.recv_frame(timeout)
        frame.close_fds()  # a JSON message carries none; any sent along are not kept
        return parse_message(frame.payload)

    def close(self) -> None:
        # shutdown first: it wakes a thread blocked in recv on this socket (close alone does not).
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()


def parse_message(payload: bytes) -> JsonObject:
    """A frame's payload as a JSON object message (`ChannelClosed` if it is not one)."""
    try:
        message = json.loads(payload)
    except ValueError:  # not JSON (nor UTF-8): as malformed as a message can be
        raise ChannelClosed("malformed message") from None
    if not isinstance(message, dict):
        raise ChannelClosed("malformed message")
    return message


def _close_all(fds: list[int] | tuple[int, ...]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
