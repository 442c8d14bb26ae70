"""A Referee's fork server, driver side: starts `harness.sandboxed.forkserver` and asks it for sandboxes.

A CPU sandbox that runs candidate code (compile, builder, candidate) costs an interpreter start and
a torch import when it is exec'd (1.3-1.6 CPU-seconds on the 2-core host: two per attempt, more
than a quick attempt's compile and timing together). The fork server pays that once per Referee
and forks each sandbox, confined by the same warden code (`harness.warden`); `ForkedWarden` is the
driver's handle on one, shaped like the `subprocess.Popen` of an exec'd warden. Standard library
only. Not used on CUDA (a process forked after torch's import must not be the one that
initialises CUDA in the fork server's place: unverified on a GPU) nor for the problem's sandboxes.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading

from harness.sandboxspec import SandboxSpec
from vocabulary.wire import JsonObject

__all__ = ["ForkServer", "ForkServerFailed", "ForkedWarden"]

#: How long a request may wait for the server (its first waits for the server's torch import).
_REPLY_S = 120.0
_EXIT = struct.Struct("=i")


class ForkServerFailed(OSError):
    """The fork server did not start a sandbox (the caller starts it the usual way)."""


class ForkedWarden:
    """A sandbox's warden forked by the server: its pid (a session leader, so its process group is
    its tree) and its exit status, which the warden writes to a pipe before it exits (the server,
    not this process, is its parent). Enough of `subprocess.Popen` for `harness.sandbox.SandboxProcess`."""

    def __init__(self, pid: int, exit_pipe: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exit_pipe = exit_pipe
        self._lock = threading.Lock()

    def _read_exit(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is None:
                waiting = select.poll()  # not select(): a busy worker's descriptors pass 1024
                waiting.register(self._exit_pipe, select.POLLIN)
                if not waiting.poll(None if timeout is None else timeout * 1000):
                    return None
                data = os.read(self._exit_pipe, _EXIT.size)
                os.close(self._exit_pipe)
                # No status: the warden was killed before it could write one (SIGKILL, as Popen says).
                self.returncode = _EXIT.unpack(data)[0] if len(data) == _EXIT.size else -9
            return self.returncode

    def poll(self) -> int | None:
        return self._read_exit(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._read_exit(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"sandbox warden {self.pid}", timeout or 0)
        return code


class ForkServer:
    """One fork server process, started on the first `spawn` (``spec``: its directory and
    environment), stopped by `close`. Thread-safe: one request at a time."""

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.spec.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.spec.workdir / "forkserver.log", "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-P", "-m", "harness.sandboxed.forkserver", str(theirs.fileno())],
                env=self.spec.environment(os.environ), cwd=self.spec.workdir, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),), start_new_session=True,
            )
        theirs.close()
        ours.settimeout(_REPLY_S)
        self._control = ours
        return ours

    def spawn(self, role: str, warden: JsonObject, env: dict[str, str], *, log: int, channel: int,
              status: int) -> ForkedWarden:
        """Fork a sandbox of ``role`` with the warden configuration ``warden`` and environment ``env``;
        ``log``, ``channel`` and ``status`` are the descriptors an exec'd warden would inherit.

        Raises:
            ForkServerFailed: the server is gone, refused the request or did not answer.
        """
        exit_read, exit_write = os.pipe()
        try:
            with self._lock:
                control = self._control or self._start()
                request = json.dumps({"role": role, "warden": warden, "env": env}).encode()
                try:
                    socket.send_fds(control, [request], [log, channel, status, exit_write])
                    reply = control.recv(65536)
                except OSError as exc:
                    self._stop()
                    raise ForkServerFailed(f"the fork server did not answer: {exc}") from exc
                if not reply:
                    self._stop()
                    raise ForkServerFailed(f"the fork server ended (its log: {self.spec.workdir})")
        except BaseException:
            os.close(exit_read)
            raise
        finally:
            os.close(exit_write)
        answer = json.loads(reply)
        if "pid" not in answer:
            os.close(exit_read)
            raise ForkServerFailed(f"the fork server refused: {answer.get('error')}")
        return ForkedWarden(int(answer["pid"]), exit_read)

    def _stop(self) -> int:
        """End the server; its exit status (0: it ended when told, or it was never started)."""
        if self._control is not None:
            self._control.close()  # the server kills and reaps its wardens, then exits
            self._control = None
        code = 0
        if self._process is not None:
            try:
                code = self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._process.pid, 9)
                code = self._process.wait()
            self._process = None
        return code

    def close(self) -> None:
        """Stop the server (the sandboxes it forked die with it); a later `spawn` starts a new one.
        Its directory goes too, unless it failed (its log says why)."""
        with self._lock:
            if self._stop() == 0:
                shutil.rmtree(self.spec.workdir, ignore_errors=True)
