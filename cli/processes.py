"""The child processes of the service commands: started, checked ready, restarted when they die, stopped.

``kernelloop up`` keeps its embedded workers this way, ``kernelloop serve --workers N`` its API
processes. Each child is told our pid and asks the kernel to end it when we die
(`cli.child.die_with_parent`), so a supervisor killed outright leaves nothing behind.

Every child runs ``python -P -m …`` (`python_module`): without ``-P``, ``python -m`` puts the
working directory first on ``sys.path``, and a folder holding ``config/`` or ``problems/`` (a
natural place for one's own problems) would shadow our packages.

A child says when it has started (`cli.child.report_ready`, over a pipe) or why it could not
(`cli.child.report_startup_failure`). `Children.start` waits for that: a child that dies before it
is ready is a start-up failure (`ChildStartFailed`: its reason, or the last line it wrote to
stderr), said once and never restarted; only a child that was running and then died (a crash, the
OOM killer) is restarted. Each child's stderr passes through us, so that its last words are at hand.

Also here: `reuse_port_socket`, the listening socket each API process opens on the shared port.
uvicorn's own ``--workers`` share one socket, and the process whose event loop wakes first
accepts every connection waiting (asyncio accepts up to the backlog per wake-up): on the 16-core
GPU host a burst of 200 submissions to 8 such processes was answered one after another, ~2.2 ms
apart. With a socket each (``SO_REUSEPORT``, Linux), the kernel hashes every new connection to
one of the listening processes (benchmarks/README.md, "Fourth round").
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

from rich.console import Console

from cli.child import FAILED, READY, READY_FD_ENV

__all__ = [
    "STOP_GRACE_S", "ChildSpec", "ChildStartFailed", "Children", "StopSignals", "check_port_free", "python_module",
    "reuse_port_socket", "wait_for_stop_signal",
]

err = Console(stderr=True)

#: How long stopping the children may take before they are killed (a worker's job lease then expires).
STOP_GRACE_S = 10.0
#: Pause before restarting a child that died on its own after it had started.
RESTART_DELAY_S = 2.0
#: How long a child may take to say it is ready (imports, settings, the database) on a loaded host.
STARTUP_TIMEOUT_S = 180.0
#: Exit statuses of a child that was asked to stop (exit 0, SIGINT, SIGTERM, as signal or code).
_CLEAN_EXITS = (0, -signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM)
#: Lines of a child's stderr kept, to say why it died.
_TAIL_LINES = 20


def python_module(module: str, *args: str) -> tuple[str, ...]:
    """The command of a child running ``module`` with this interpreter and our packages, whatever
    the working directory holds (``-P``: the working directory is not put on ``sys.path``)."""
    return (sys.executable, "-P", "-m", module, *args)


@dataclass(frozen=True)
class ChildSpec:
    """One child process: what it is called in messages, its command, and the environment it adds."""

    label: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


class ChildStartFailed(Exception):
    """A child exited (or hung) before it said it was ready."""

    def __init__(self, label: str, reason: str) -> None:
        super().__init__(f"{label} could not start: {reason}")
        self.label = label
        self.reason = reason


class _Child:
    """One started process of a `ChildSpec`: its stderr relayed to ours, the last lines kept."""

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        ready_r, ready_w = os.pipe()
        try:
            self.process = subprocess.Popen(spec.argv, env={**os.environ, **spec.env, READY_FD_ENV: str(ready_w)},
                                            pass_fds=(ready_w,), stderr=subprocess.PIPE)
        except BaseException:
            os.close(ready_r)
            raise
        finally:
            os.close(ready_w)
        self._ready_r = ready_r
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        assert self.process.stderr is not None
        self._relay = threading.Thread(target=self._relay_stderr, args=(self.process.stderr,),
                                       name=f"stderr-{self.process.pid}", daemon=True)
        self._relay.start()

    def _relay_stderr(self, stream: IO[bytes]) -> None:
        target = getattr(sys.stderr, "buffer", None)
        for line in iter(stream.readline, b""):
            self.tail.append(line.decode(errors="replace").rstrip())
            if target is not None:
                with contextlib.suppress(OSError, ValueError):
                    target.write(line)
                    target.flush()

    def await_ready(self, timeout_s: float, stopping: threading.Event) -> str | None:
        """``None`` once the child says it is ready; else why it could not start."""
        deadline = time.monotonic() + timeout_s
        said = b""
        try:
            while b"\n" not in said:
                if stopping.is_set():
                    return "stopped while starting"
                left = deadline - time.monotonic()
                if left <= 0:
                    self.process.kill()
                    return f"it did not say it was ready within {timeout_s:.0f} s"
                readable, _, _ = select.select([self._ready_r], [], [], min(left, 0.5))
                if not readable:
                    continue
                chunk = os.read(self._ready_r, 4096)
                if not chunk:  # the child closed its end without a word: it is exiting
                    return self._died()
                said += chunk
        finally:
            os.close(self._ready_r)
        line = said.decode(errors="replace").split("\n", 1)[0]
        if line == READY:
            return None
        return line.removeprefix(FAILED) if line.startswith(FAILED) else self._died()

    def _died(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self._relay.join(timeout=5)
        code = self.process.poll()
        last = next((line for line in reversed(self.tail) if line.strip()), "")
        status = "it is still running" if code is None else f"it exited with {code}"
        return f"{status} before it was ready" + (f": {last.strip()}" if last else "")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)

    def wait_or_kill(self, deadline: float) -> None:
        try:
            self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._relay.join(timeout=2)


class Children:
    """Child processes kept running until `stop`.

    `start` starts them and waits until each is ready; one that dies before it is ready fails the
    start (`ChildStartFailed`). Later, one that crashed or was killed (OOM) is restarted after
    `RESTART_DELAY_S`; one that stopped cleanly (Ctrl-C reaches it too) is not; a restarted one
    that cannot start again is not restarted any more: ``on_fatal`` is told, once.

    Args:
        specs: the children.
        on_fatal: told (from the monitor thread) when a restarted child cannot start; the
            supervisor then stops (`fatal` holds the failure).
        startup_timeout_s: how long a child may take to be ready.
    """

    def __init__(self, specs: Sequence[ChildSpec], *, on_fatal: Callable[[ChildStartFailed], None] | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        self._specs = list(specs)
        self._children: list[_Child | None] = [None] * len(self._specs)
        self._stopping = threading.Event()
        self._on_fatal = on_fatal
        self._startup_timeout_s = startup_timeout_s
        #: The restarted child that could not start, if one could not.
        self.fatal: ChildStartFailed | None = None
        self._monitor = threading.Thread(target=self._watch, name="child-monitor", daemon=True)

    def start(self) -> None:
        """Start every child and wait until all are ready.

        Raises:
            ChildStartFailed: one exited or hung before it was ready (every child is stopped).
        """
        for i, spec in enumerate(self._specs):
            self._children[i] = _Child(spec)
        for i, spec in enumerate(self._specs):
            child = self._children[i]
            assert child is not None
            reason = child.await_ready(self._startup_timeout_s, self._stopping)
            if reason is not None:
                self.stop()
                raise ChildStartFailed(spec.label, reason)
            err.print(f"{spec.label} started (pid {child.process.pid})")
        self._monitor.start()

    @property
    def pids(self) -> list[int]:
        return [c.process.pid for c in self._children if c is not None]

    def _watch(self) -> None:
        while not self._stopping.wait(1.0):
            for i, child in enumerate(self._children):
                # A restarted child dies with this thread, which lives until `stop`
                # (PR_SET_PDEATHSIG follows the thread that started the child).
                if child is None or child.process.poll() in (None, *_CLEAN_EXITS) or self._stopping.is_set():
                    continue
                spec = self._specs[i]
                err.print(f"[yellow]{spec.label} exited with {child.process.returncode}; restarting[/]")
                if self._stopping.wait(RESTART_DELAY_S):
                    return
                fresh = _Child(spec)
                self._children[i] = fresh
                reason = fresh.await_ready(self._startup_timeout_s, self._stopping)
                if reason is not None and not self._stopping.is_set():
                    self._children[i] = None
                    self.fatal = ChildStartFailed(spec.label, reason)
                    err.print(f"[red]error:[/red] {self.fatal}; not restarting it")
                    if self._on_fatal is not None:
                        self._on_fatal(self.fatal)
                    return

    def stop(self) -> None:
        """SIGTERM every child, then SIGKILL those still running after `STOP_GRACE_S`."""
        self._stopping.set()
        alive = [c for c in self._children if c is not None and c.process.poll() is None]
        for child in alive:
            child.stop()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in alive:
            child.wait_or_kill(deadline)


def _address(host: str, port: int) -> tuple[socket.AddressFamily, tuple[str, int] | tuple[str, int, int, int]]:
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    return family, address  # type: ignore[return-value]


def check_port_free(host: str, port: int) -> None:
    """Raise `OSError` if anything listens on ``host:port``.

    Bound without ``SO_REUSEPORT``, so that a listener that has it (another ``serve --workers``
    left running) is found too, instead of being joined: it would then get a share of our traffic.
    """
    family, address = _address(host, port)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(address)


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT``, not yet listening (uvicorn starts
    listening once the app has started, so no connection is given to a process still starting)."""
    family, address = _address(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock


class StopSignals:
    """SIGINT and SIGTERM, counted by a handler that takes no lock.

    Python runs a handler in the main thread between two bytecodes, possibly while that thread
    holds a lock; a handler that calls `threading.Event.set` then waits for ever on the event's
    lock, held by its own thread (the signal module's docs warn against locks in handlers).
    `kernelloop optimize` hung so on a SIGTERM, its job running on. This handler adds to `count`
    and writes a byte to a pipe, which `wait` selects on.
    """

    def __init__(self) -> None:
        self.count = 0
        self._read_fd = self._write_fd = -1

    def _on_signal(self, signum: int, frame: object) -> None:
        self.count += 1
        with contextlib.suppress(OSError):  # a full pipe has woken the waiter already
            os.write(self._write_fd, b"\0")

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopSignals]:
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._read_fd)
            os.close(self._write_fd)

    def wait(self, timeout: float, *, beyond: int = 0) -> bool:
        """Wait up to ``timeout`` seconds for more than ``beyond`` signals in all; whether they came.
        A signal between the count's check and the wait has written its byte: the wait ends at once."""
        if self.count <= beyond:
            select.select([self._read_fd], [], [], timeout)
            with contextlib.suppress(BlockingIOError):
                os.read(self._read_fd, 4096)
        return self.count > beyond


#: How often `wait_for_stop_signal` looks at the event another thread may set.
_STOP_POLL_S = 0.2


def wait_for_stop_signal(arrived: threading.Event | None = None) -> None:
    """Block until SIGINT or SIGTERM arrives (or ``arrived`` is set by another thread)."""
    with StopSignals().installed() as signals:
        while not signals.wait(_STOP_POLL_S):
            if arrived is not None and arrived.is_set():
                return
