"""The embedded mode's worker: the database is the queue (no Redis, no Celery).

An `EmbeddedWorker` takes the oldest queued job of its target (`store.claim_next_job`, atomic)
and runs it with the same `worker.runner.run_claimed_job` as the Celery task; when nothing is queued it
waits ``settings.poll_interval_s``. A `worker.reaper.Reaper` thread hands back jobs of workers
that died (nothing to re-dispatch: a re-queued row is picked up by the next poll).
docs/deploy.md has the measurements that chose this over a Celery embedded transport.

``python -m worker.embedded [--target cpu|cuda]`` runs one such worker process; ``kernelloop up``
starts one per GPU (``CUDA_VISIBLE_DEVICES``) or one CPU worker, beside the API (through
``python -m cli.service embedded-worker``, which first makes it die with ``up``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from config import Settings, load_settings
from config.logs import LOG_FORMAT
from harness import HarnessOptions, Referee, cancel_all
from store import Target, claim_next_job, make_engine, make_session_factory, session_scope
from worker.lease import check_lease_settings, new_worker_id
from worker.reaper import Reaper
from worker.runner import AgentRunner, RefereeFactory, RunOutcome, harness_options_for, run_claimed_job
from worker.warmup import start_header_warmup

__all__ = ["STOP_DEADLINE_S", "EmbeddedWorker", "run_embedded_worker", "stop_now"]

log = logging.getLogger(__name__)



class EmbeddedWorker:
    """Claims and runs queued jobs of one target, one at a time.

    Args:
        settings: the service settings (``poll_interval_s``, lease, reaper).
        session_factory: sessions on the service's database.
        target: the jobs this worker runs.
        worker_id: its unique id (default: a new one for this process).
        harness_options: overrides the harness options built from the settings (tests).
        run_agent: runs an agent job (default `agent.run_job`; tests and the load run pass their own).
        referee_factory: builds the referees (default `harness.Referee`; the load run's double
            judges nothing).
        reap: also run the lease reaper in this process.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        session_factory: sessionmaker[Session],
        target: Target,
        worker_id: str | None = None,
        harness_options: HarnessOptions | None = None,
        run_agent: AgentRunner | None = None,
        referee_factory: RefereeFactory = Referee,
        reap: bool = True,
    ) -> None:
        check_lease_settings(lease_seconds=settings.lease_seconds, heartbeat_seconds=settings.heartbeat_seconds)
        self.settings = settings
        self._factory = session_factory
        self.target = Target(target)
        self.worker_id = worker_id or new_worker_id(f"embedded-{self.target.value}")
        self._harness_options = harness_options
        self._run_agent = run_agent
        self._referee_factory = referee_factory
        self._reaper = Reaper(session_factory=session_factory, max_requeues=settings.max_requeues,
                              interval_s=settings.reaper_interval_s) if reap else None
        self._stop = threading.Event()

    def run_once(self) -> tuple[int, RunOutcome] | None:
        """Claim the oldest queued job of the target and run it; ``None`` when none is queued."""
        with session_scope(self._factory) as session:
            job = claim_next_job(session=session, worker_id=self.worker_id, target=self.target,
                                 lease_seconds=self.settings.lease_seconds)
            job_id = job.id if job is not None else None
        if job_id is None:
            return None
        log.info("job %s claimed by %s", job_id, self.worker_id)
        outcome = run_claimed_job(job_id, settings=self.settings, session_factory=self._factory,
                                  worker_id=self.worker_id, harness_options=self._harness_options,
                                  run_agent=self._run_agent, referee_factory=self._referee_factory)
        log.info("job %s: %s", job_id, outcome.value)
        return job_id, outcome

    def serve(self, *, max_jobs: int | None = None) -> int:
        """Run jobs until `stop` (or ``max_jobs`` jobs); returns how many ran."""
        ran = 0
        if self._reaper is not None:
            self._reaper.start()
        try:
            while not self._stop.is_set() and (max_jobs is None or ran < max_jobs):
                try:
                    done = self.run_once()
                except Exception:  # the database is unreachable or locked: wait and try again
                    log.exception("embedded worker: claiming a job failed")
                    done = None
                if done is None:
                    self._stop.wait(self.settings.poll_interval_s)
                else:
                    ran += 1
        finally:
            if self._reaper is not None:
                self._reaper.stop()
        return ran

    def stop(self) -> None:
        """Stop after the running job (if any) ends."""
        self._stop.set()


#: A worker told to stop (or orphaned) that has not exited after this long exits regardless.
STOP_DEADLINE_S = 5.0


def stop_now(code: int) -> None:
    """Exit within seconds, whatever the job in flight is doing: its sandboxes are killed first
    (`harness.cancel_all`: the evaluation ends as cancelled, nothing runs on without us, the
    device lock is released with our file descriptors); its lease then expires and the reaper
    re-queues it. Safe from any thread; ends the process."""
    threading.Timer(STOP_DEADLINE_S, os._exit, args=(code,)).start()
    try:
        cancel_all()
    except Exception:  # exiting matters more than a clean cancel
        log.exception("cancelling the sandboxes failed")
    logging.shutdown()
    os._exit(code)


def _stop_now_on_sigterm() -> None:
    """SIGTERM ends the worker through `stop_now`, on a thread started here, not by an unwind of the
    main thread (it would wait for the evaluation in flight: minutes). The handler only writes to a
    pipe: one that started the thread itself would take locks, and Python runs a handler in the main
    thread, maybe while that thread holds the very lock (then it waits for ever)."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)

    def stop_when_told() -> None:
        signum = os.read(read_fd, 1)
        stop_now(128 + (signum[0] if signum else signal.SIGTERM))

    threading.Thread(target=stop_when_told, name="stop", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda signum, frame: os.write(write_fd, bytes([signum])))


def run_embedded_worker(argv: list[str] | None = None, *, on_ready: Callable[[], None] | None = None) -> int:
    """Run one embedded worker until SIGTERM or Ctrl-C; ``on_ready`` is told once it has started
    (settings read, database reachable), before the first job is claimed."""
    parser = argparse.ArgumentParser(prog="python -m worker.embedded", description=__doc__.split("\n")[0])
    parser.add_argument("--target", choices=[t.value for t in Target], default=None,
                        help="the jobs to run (default: KERNELLOOP_WORKER_TARGET)")
    parser.add_argument("--max-jobs", type=int, default=None, help="exit after this many jobs")
    args = parser.parse_args(argv)
    _stop_now_on_sigterm()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    settings = load_settings()
    engine = make_engine(settings.resolved_database_url)
    worker = EmbeddedWorker(settings=settings, session_factory=make_session_factory(engine),
                            target=Target(args.target or settings.worker_target))
    log.info("embedded worker %s: %s jobs, CUDA_VISIBLE_DEVICES=%s", worker.worker_id, worker.target.value,
             os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    if settings.warm_headers:
        start_header_warmup(harness_options_for(settings), worker.target.value)
    if on_ready is not None:
        with engine.connect():  # the database answers: what a worker needs before it is "up"
            pass
        on_ready()
    try:
        worker.serve(max_jobs=args.max_jobs)
    except KeyboardInterrupt:
        pass
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(run_embedded_worker())
