"""The child processes of the service commands: started, restarted when they die, stopped.

``kernelloop up`` keeps its embedded workers this way, ``kernelloop serve --workers N`` its API
processes. Each child is told our pid and asks the kernel to end it when we die
(`die_with_parent`), so a supervisor killed outright leaves nothing behind.

Also here: `reuse_port_socket`, the listening socket each API process opens on the shared port.
uvicorn's own ``--workers`` share one socket, and the process whose event loop wakes first
accepts every connection waiting (asyncio accepts up to the backlog per wake-up): on the 16-core
GPU host a burst of 200 submissions to 8 such processes was answered one after another, ~2.2 ms
apart. With a socket each (``SO_REUSEPORT``, Linux), the kernel hashes every new connection to
one of the listening processes (benchmarks/README.md, "Fourth round").
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rich.console import Console

__all__ = [
    "STOP_GRACE_S", "ChildSpec", "Children", "check_port_free", "die_with_parent", "reuse_port_socket",
    "wait_for_stop_signal", "watch_parent",
]

err = Console(stderr=True)

#: How long stopping the children may take before they are killed (a worker's job lease then expires).
STOP_GRACE_S = 10.0
#: Pause before restarting a child that died on its own.
RESTART_DELAY_S = 2.0
#: Exit statuses of a child that was asked to stop (exit 0, SIGINT, SIGTERM, as signal or code).
_CLEAN_EXITS = (0, -signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM)
_PR_SET_PDEATHSIG = 1
#: How often `watch_parent` looks for its supervisor.
PARENT_POLL_S = 0.5


@dataclass(frozen=True)
class ChildSpec:
    """One child process: what it is called in messages, its command, and the environment it adds."""

    label: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


class Children:
    """Child processes kept running until `stop`: one that crashed or was killed (OOM) is restarted
    after `RESTART_DELAY_S`; one that stopped cleanly (Ctrl-C reaches it too) is not."""

    def __init__(self, specs: Sequence[ChildSpec]) -> None:
        self._specs = list(specs)
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * len(self._specs)
        self._stopping = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="child-monitor", daemon=True)

    def _spawn(self, spec: ChildSpec) -> subprocess.Popen[bytes]:
        return subprocess.Popen(spec.argv, env={**os.environ, **spec.env})

    def start(self) -> None:
        for i, spec in enumerate(self._specs):
            self._processes[i] = self._spawn(spec)
            err.print(f"{spec.label} started (pid {self._processes[i].pid})")  # type: ignore[union-attr]
        self._monitor.start()

    def _watch(self) -> None:
        while not self._stopping.wait(1.0):
            for i, process in enumerate(self._processes):
                # A restarted child dies with this thread, which lives until `stop`
                # (PR_SET_PDEATHSIG follows the thread that started the child).
                if process is not None and process.poll() not in (None, *_CLEAN_EXITS) and not self._stopping.is_set():
                    spec = self._specs[i]
                    err.print(f"[yellow]{spec.label} exited with {process.returncode}; restarting[/]")
                    if self._stopping.wait(RESTART_DELAY_S):
                        return
                    self._processes[i] = self._spawn(spec)

    def stop(self) -> None:
        """SIGTERM every child, then SIGKILL those still running after `STOP_GRACE_S`."""
        self._stopping.set()
        alive = [p for p in self._processes if p is not None and p.poll() is None]
        for process in alive:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in alive:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def die_with_parent(parent_pid: int) -> None:
    """In a child: ask the kernel to SIGTERM us when our supervisor dies, however it dies (Linux).

    The request only covers a parent still alive when it is made: if ours (``parent_pid``, as it
    told us) is already gone, exit now.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
        sys.exit(1)


def watch_parent(parent_pid: int, on_orphaned: Callable[[], None], *,
                 poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """In a child: call ``on_orphaned`` (which should end the process) once the supervisor
    ``parent_pid`` is gone, checked every ``poll_s`` in a daemon thread.

    The backstop of `die_with_parent`: a signal handler runs only when the main thread gets back
    to the interpreter (a worker's main thread may wait minutes for an evaluation), and the death
    signal follows the supervisor's thread that started us, not the supervisor itself.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        on_orphaned()

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


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


def wait_for_stop_signal() -> None:
    """Block until SIGINT or SIGTERM arrives."""
    arrived = threading.Event()
    previous = {sig: signal.signal(sig, lambda signum, frame: arrived.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        arrived.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
