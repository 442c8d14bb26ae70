"""The lease reaper: jobs whose worker stopped renewing their lease go back to the queue, or fail.

Recovery does not rely on the broker: a worker that died (SIGKILL, OOM, a lost host) leaves its
job ``running`` with a lease that runs out. `reap_once` hands every such job back
(`store.reap_expired_leases`: re-queued, or failed with the reason after ``max_requeues``, or
cancelled if a cancel was pending; attempts already stored stay) and then re-dispatches the
re-queued ones: a Celery message in the distributed mode, nothing in the embedded mode (there
the database is the queue).

With a dispatcher, a pass also re-sends the message of every job still queued
``redispatch_after_s`` after its creation or its last message (`store.redispatch_stale_jobs`):
the API commits a job before it sends the message, and an API process that dies in between
leaves a queued job no worker would hear of. A job that was only waiting for a free worker gets
a duplicate message, which the worker skips (the task claims its job by id while it is queued).

Every worker process runs a `Reaper` thread; several reapers are safe, since each move is a
guarded update that only one of them wins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from store import Job, JobState, ReapedJob, Target, reap_expired_leases, redispatch_stale_jobs, session_scope

__all__ = ["Dispatch", "Reaper", "reap_once"]

log = logging.getLogger(__name__)

#: How long `Reaper.stop` waits for a pass in progress.
_STOP_TIMEOUT_S = 10.0

#: Sends a re-queued job to its workers: ``dispatch(job_id, target)``.
Dispatch = Callable[[int, Target], None]


def reap_once(
    *,
    session_factory: sessionmaker[Session],
    max_requeues: int,
    dispatch: Dispatch | None = None,
    undelivered: dict[int, Target] | None = None,
    redispatch_after_s: float | None = None,
) -> list[ReapedJob]:
    """One pass: reap every expired lease, pick the stale queued jobs, commit, then send messages.

    Args:
        dispatch: sends a job's message (``None`` in the embedded mode: nothing is sent, and
            nothing needs re-sending).
        undelivered: jobs whose message could not be sent (the broker was down) are added here,
            for the caller to send again later (`Reaper` does, every pass).
        redispatch_after_s: with ``dispatch``, also re-send the message of every job queued this
            long without a worker taking it (`store.redispatch_stale_jobs`); ``None``: never.

    Returns:
        The jobs whose lease expired, and where they went (re-dispatched jobs are only logged).
    """
    with session_scope(session_factory) as session:
        reaped = reap_expired_leases(session=session, max_requeues=max_requeues)
        requeued = [r.job_id for r in reaped if r.state is JobState.QUEUED]
        targets: dict[int, Target] = {}
        if requeued:
            rows = session.execute(select(Job.id, Job.target).where(Job.id.in_(requeued)))
            targets = {job_id: target for job_id, target in rows}
        stale: list[tuple[int, Target]] = []
        if dispatch is not None and redispatch_after_s is not None:
            stale = redispatch_stale_jobs(session=session, older_than_s=redispatch_after_s)
    for job in reaped:
        log.warning("job %s: %s -> %s", job.job_id, job.reason, job.state.value)
    for job_id, _ in stale:
        log.warning("job %s: still queued %.0f s after its last message; sending it again", job_id,
                    redispatch_after_s)
    if dispatch is not None:
        for job_id, target in [*((j, targets[j]) for j in requeued), *stale]:
            try:
                dispatch(job_id, target)
            except Exception:  # the broker is down: the job stays queued until it is sent again
                log.exception("could not re-dispatch job %s", job_id)
                if undelivered is not None:
                    undelivered[job_id] = target
    return reaped


class Reaper:
    """Runs `reap_once` every ``interval_s`` in a daemon thread until `stop`.

    Messages that could not be sent (re-queued or re-dispatched jobs) are tried again at every
    pass, as long as their job is still queued.
    """

    def __init__(
        self,
        *,
        session_factory: sessionmaker[Session],
        max_requeues: int,
        interval_s: float,
        dispatch: Dispatch | None = None,
        redispatch_after_s: float | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"the reaper interval must be positive, got {interval_s}")
        if redispatch_after_s is not None and redispatch_after_s <= 0:
            raise ValueError(f"redispatch_after_s must be positive, got {redispatch_after_s}")
        self._factory = session_factory
        self._max_requeues = max_requeues
        self._interval_s = interval_s
        self._dispatch = dispatch
        self._redispatch_after_s = redispatch_after_s
        self._undelivered: dict[int, Target] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-reaper", daemon=True)

    def start(self) -> Reaper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=_STOP_TIMEOUT_S)

    def run_pass(self) -> list[ReapedJob]:
        """One pass: resend what could not be sent before, then reap."""
        self._resend()
        return reap_once(session_factory=self._factory, max_requeues=self._max_requeues, dispatch=self._dispatch,
                         undelivered=self._undelivered, redispatch_after_s=self._redispatch_after_s)

    def _resend(self) -> None:
        if not self._undelivered or self._dispatch is None:
            return
        with session_scope(self._factory) as session:
            queued = set(session.scalars(select(Job.id).where(
                Job.id.in_(list(self._undelivered)), Job.state == JobState.QUEUED)))
        for job_id, target in list(self._undelivered.items()):
            if job_id not in queued:
                del self._undelivered[job_id]
                continue
            try:
                self._dispatch(job_id, target)
            except Exception:
                log.warning("job %s: the broker is still unreachable", job_id, exc_info=True)
                return
            del self._undelivered[job_id]

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            try:
                self.run_pass()
            except Exception:  # the database is unreachable: try again next interval
                log.exception("lease reaper pass failed")
