"""What a child process of ``kernelloop up`` or ``serve --workers`` does for its supervisor
(`cli.processes.Children`): say that it started, or why it could not, and die with it.

The supervisor names a pipe in `READY_FD_ENV`; the child writes one line on it, ``ready`` or
``failed <reason>`` (`report_ready`, `report_startup_failure`; `starting_up` reports an exception
raised while starting), and closes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

__all__ = [
    "FAILED", "READY", "READY_FD_ENV", "die_with_parent", "report_ready", "report_startup_failure",
    "starting_up", "watch_parent",
]

#: The environment variable that names the pipe a child reports its start-up on.
READY_FD_ENV = "KERNELLOOP_READY_FD"
#: The two things a child can say on it (a failure is followed by its reason).
READY = "ready"
FAILED = "failed "
_PR_SET_PDEATHSIG = 1
#: How often `watch_parent` looks for its supervisor.
PARENT_POLL_S = 0.5
#: Characters of a start-up failure's reason sent over the pipe (one write stays atomic).
_REASON_CHARS = 2000


def _report(line: str) -> bool:
    """Send one line to the supervisor's ready pipe, once; ``False`` if there is none (run by hand)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd is None:
        return False
    with contextlib.suppress(OSError, ValueError):
        os.write(int(fd), (line + "\n").encode())
        os.close(int(fd))
    return True


def report_ready() -> None:
    """In a child: tell the supervisor this process has started (its imports, settings and
    database are fine)."""
    _report(READY)


def report_startup_failure(reason: str) -> bool:
    """In a child: tell the supervisor why this process cannot start (one line); ``False`` when
    already reported or not started by a supervisor."""
    return _report(FAILED + " ".join(reason.split())[:_REASON_CHARS])


@contextlib.contextmanager
def starting_up() -> Iterator[None]:
    """In a child: an exception before `report_ready` is reported as the start-up failure and
    exits 1 (the supervisor says it, once); one after it propagates as any other."""
    try:
        yield
    except Exception as exc:
        if report_startup_failure(f"{type(exc).__name__}: {exc}"):
            raise SystemExit(1) from None
        raise


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
