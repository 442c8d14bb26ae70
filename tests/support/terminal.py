"""A command run in a pseudo-terminal of a given size, as a person runs it: the terminal is its
controlling terminal, so typing Ctrl-C (``\\x03``) sends SIGINT to it as a shell would (stdlib only)."""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["Terminal", "plain"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def plain(raw: bytes) -> str:
    """What a terminal drew, escape sequences removed, carriage returns as line ends."""
    return _ANSI.sub("", raw.decode("utf-8", errors="replace")).replace("\r\n", "\n").replace("\r", "\n")


def _become_terminal_owner() -> None:
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``argv`` started with a pseudo-terminal of ``columns`` × ``rows`` as stdin, stdout, stderr and
    controlling terminal; what it draws is read as it comes."""

    def __init__(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str], columns: int = 120,
                 rows: int = 40) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        env = {**env, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(rows)}
        self.process = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                                        close_fds=True, preexec_fn=_become_terminal_owner)
        os.close(slave)
        self._master = master
        self._raw = bytearray()
        self._closed = False

    @property
    def screen(self) -> str:
        """Everything drawn so far, plain."""
        return plain(bytes(self._raw))

    def _read(self, timeout: float) -> None:
        if self._closed:
            time.sleep(timeout)
            return
        ready, _, _ = select.select([self._master], [], [], timeout)
        if not ready:
            return
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: the other side is closed
            data = b""
        if data:
            self._raw.extend(data)
        else:
            self._closed = True

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first match of ``pattern`` in what was drawn, waiting up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.screen)
            if found:
                return found
            if time.monotonic() > deadline or (self._closed and self.process.poll() is not None):
                raise AssertionError(f"{pattern!r} never drawn; the screen:\n{self.screen[-5000:]}")
            self._read(0.2)

    def type(self, keys: bytes) -> None:
        os.write(self._master, keys)

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def finish(self, timeout: float) -> int:
        """Read until the command exits (or ``timeout`` passes: killed, an AssertionError); its status."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("it did not exit; the screen:\n" + self.screen[-5000:])
            self._read(0.2)
        drained = len(self._raw) - 1
        while not self._closed and drained != len(self._raw):  # what it drew last
            drained = len(self._raw)
            self._read(0.3)
        os.close(self._master)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
