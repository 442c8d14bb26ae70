"""A running job's lease, kept alive by a heartbeat thread.

The job row's lease (worker id + expiry) is the truth about who runs a job, not the broker: a
worker renews it every ``heartbeat_seconds``; the reaper takes back jobs whose lease expired.
`LeaseKeeper` renews it in a daemon thread and tells the job's code, at its safe points, whether
to carry on, stop because the owner asked (``cancel requested``), or stop and store nothing more
because the job is not this worker's any more (``lost``).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from enum import StrEnum

from sqlalchemy.orm import Session, sessionmaker

from store import LeaseStatus, heartbeat, lease_status, session_scope

__all__ = ["LeaseKeeper", "StopSignal", "check_lease_settings", "new_worker_id"]

log = logging.getLogger(__name__)

#: How much longer than one heartbeat interval `LeaseKeeper.stop` waits for its thread.
_JOIN_SLACK_S = 5.0
#: Between heartbeats, the job row is read this often for a cancel (a read, no lease renewal):
#: a cancel reaches the job's sandboxes within about this long.
CANCEL_POLL_S = 1.0


def check_lease_settings(*, lease_seconds: float, heartbeat_seconds: float) -> None:
    """Refuse settings under which every job would lose its lease between two heartbeats.

    Raises:
        ValueError: ``heartbeat_seconds`` is not positive or not under half of ``lease_seconds``
            (one late heartbeat must not cost the job).
    """
    if not 0 < heartbeat_seconds <= lease_seconds / 2:
        raise ValueError(f"KERNELLOOP_HEARTBEAT_SECONDS ({heartbeat_seconds}) must be positive and at most half "
                         f"of KERNELLOOP_LEASE_SECONDS ({lease_seconds})")


def new_worker_id(kind: str = "worker") -> str:
    """A worker id unique per process: ``kind@host:pid:random`` (see `store.claim_next_job`)."""
    return f"{kind}@{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class StopSignal(StrEnum):
    """Why the job's code should stop at its next safe point."""

    #: The job's owner asked to cancel; finish it as ``cancelled``.
    CANCEL = "cancel"
    #: The job is not running under this worker any more (reaped, finished, deleted), or the
    #: heartbeats have failed for longer than the lease: store nothing more.
    LOST = "lost"
    #: The problem's own code failed (raised, hung, hit a limit): no candidate can be judged
    #: against it; finish the job as failed, with the problem's error.
    PROBLEM = "problem"


class LeaseKeeper:
    """Renews one job's lease in a daemon thread until `stop`.

    Args:
        session_factory: sessions on the service's database.
        job_id: the job this worker claimed.
        worker_id: the id it claimed it under.
        lease_seconds: how long each renewal extends the lease.
        interval_s: seconds between renewals (well under ``lease_seconds``).
        cancel_poll_s: seconds between reads of the job's cancel flag in between renewals.
    """

    def __init__(
        self,
        *,
        session_factory: sessionmaker[Session],
        job_id: int,
        worker_id: str,
        lease_seconds: float,
        interval_s: float,
        cancel_poll_s: float = CANCEL_POLL_S,
    ) -> None:
        if not 0 < interval_s < lease_seconds:
            raise ValueError(f"the heartbeat interval ({interval_s} s) must be positive and under the lease "
                             f"({lease_seconds} s)")
        self._factory = session_factory
        self.job_id = job_id
        self.worker_id = worker_id
        self._lease_seconds = lease_seconds
        self._interval_s = interval_s
        self._poll_s = min(interval_s, cancel_poll_s)
        self._on_stop: list[Callable[[StopSignal], None]] = []
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._stop_reason: StopSignal | None = None
        self._last_held = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"lease-{job_id}", daemon=True)

    # -- what the job's code asks at its safe points --------------------------------------
    @property
    def stop_reason(self) -> StopSignal | None:
        """``None`` while the job should carry on."""
        with self._lock:
            return self._stop_reason

    @property
    def lost(self) -> bool:
        return self.stop_reason is StopSignal.LOST

    @property
    def cancel_requested(self) -> bool:
        return self.stop_reason is StopSignal.CANCEL

    def should_stop(self) -> bool:
        return self.stop_reason is not None

    def note(self, status: LeaseStatus) -> None:
        """Record what a heartbeat made elsewhere learnt (a guarded write in `worker.recorder`)."""
        self._note(status)

    def stop_for_problem(self) -> None:
        """The problem's code failed: the job's code stops at its next safe point (`PROBLEM`)."""
        self._set(StopSignal.PROBLEM)

    def on_stop(self, callback: Callable[[StopSignal], None]) -> None:
        """Call ``callback(reason)`` once, from the thread that learns it, when the job must stop
        (cancel, lost, problem): e.g. to cancel the evaluation in flight. Called at once if it
        must stop already."""
        with self._lock:
            reason = self._stop_reason
            if reason is None:
                self._on_stop.append(callback)
        if reason is not None:
            callback(reason)

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self._interval_s + _JOIN_SLACK_S)

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def beat(self) -> LeaseStatus | None:
        """Renew the lease now; ``None`` when the database could not be reached."""
        try:
            with session_scope(self._factory) as session:
                status = heartbeat(session=session, job_id=self.job_id, worker_id=self.worker_id,
                                   lease_seconds=self._lease_seconds)
        except Exception:  # the database is down or locked: try again at the next beat
            log.warning("heartbeat of job %s failed", self.job_id, exc_info=True)
            if time.monotonic() - self._last_held > self._lease_seconds:
                # The lease has run out by now; the reaper may hand the job to someone else.
                self._note(LeaseStatus.LOST)
            return None
        self._note(status)
        return status

    def _note(self, status: LeaseStatus) -> None:
        if status is LeaseStatus.LOST:
            self._set(StopSignal.LOST, overrides=True)
            return
        with self._lock:
            self._last_held = time.monotonic()
        if status is LeaseStatus.CANCEL_REQUESTED:
            self._set(StopSignal.CANCEL)

    def _set(self, reason: StopSignal, *, overrides: bool = False) -> None:
        with self._lock:
            if self._stop_reason is not None and not overrides:
                return
            first = self._stop_reason is None
            self._stop_reason = reason
            callbacks, self._on_stop = (self._on_stop, []) if first else ([], self._on_stop)
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:
                log.exception("job %s: a stop callback failed", self.job_id)

    def _poll(self) -> None:
        """Read the job's cancel flag between heartbeats (no renewal; a failed read waits)."""
        try:
            with session_scope(self._factory) as session:
                status = lease_status(session=session, job_id=self.job_id, worker_id=self.worker_id)
        except Exception:
            log.debug("reading job %s's cancel flag failed", self.job_id, exc_info=True)
            return
        if status is LeaseStatus.CANCEL_REQUESTED:
            self._set(StopSignal.CANCEL)

    def _run(self) -> None:
        renewed = time.monotonic()
        while not self._stopped.is_set():
            self._wake.wait(self._poll_s)
            self._wake.clear()
            if self._stopped.is_set():
                return
            if time.monotonic() - renewed < self._interval_s - self._poll_s / 2:
                self._poll()
                continue
            renewed = time.monotonic()
            if self.beat() is LeaseStatus.LOST:
                log.warning("job %s: lease lost by %s", self.job_id, self.worker_id)
                return
