"""How the API tells workers about a new job: one Celery message per job, or nothing at all.

The job row is the truth; a message only wakes a worker of the right queue (the worker claims
jobs atomically from the database, see `store.claim_next_job`). In the embedded mode there is
no broker: the worker polls the database, and `NullDispatcher` sends nothing.
"""

from __future__ import annotations

import logging
from typing import Protocol

from celery import Celery

from config import Settings
from store import Target

__all__ = ["RUN_JOB_TASK", "CeleryDispatcher", "DispatchError", "Dispatcher", "NullDispatcher"]

#: The worker's task, by name: the API never imports the worker's code.
RUN_JOB_TASK = "kernelloop.run_job"
#: A broker that does not answer within this long is down: the submission fails fast with 503
#: instead of holding the request (and a thread) for Celery's default retry schedule.
BROKER_TIMEOUT_S = 2.0
log = logging.getLogger(__name__)

#: kombu's ``retry_policy`` (`kombu.Connection.ensure`'s arguments).
_PUBLISH_RETRY_POLICY: dict[str, float] = {
    "max_retries": 2,
    "interval_start": 0.0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}


class DispatchError(Exception):
    """The queue did not take the message (broker down or refusing)."""


class Dispatcher(Protocol):
    def job_created(self, job_id: int, target: str) -> None:
        """Announce a committed, queued job. Raises `DispatchError` when the queue is unreachable."""
        ...


class NullDispatcher:
    """The embedded mode: workers poll the database, so there is nobody to tell."""

    def job_created(self, job_id: int, target: str) -> None:
        return None


class CeleryDispatcher:
    """Sends ``kernelloop.run_job(job_id)`` to the target's queue (`Settings.queue_for`)."""

    def __init__(self, settings: Settings) -> None:
        if settings.broker_url is None:
            raise ValueError("CeleryDispatcher needs settings.broker_url (the embedded mode uses NullDispatcher)")
        self._settings = settings
        # A client-only app: never the process's "current" app, no tasks registered, no worker.
        self._app = Celery("kernelloop-api", broker=settings.broker_url, set_as_current=False)
        self._app.conf.update(
            task_serializer="json",
            accept_content=["json"],
            task_publish_retry_policy=_PUBLISH_RETRY_POLICY,
            broker_connection_timeout=BROKER_TIMEOUT_S,
            broker_transport_options={
                "socket_connect_timeout": BROKER_TIMEOUT_S,
                "socket_timeout": BROKER_TIMEOUT_S,
            },
        )

    def connect(self) -> None:
        """Get ready to send before the first submission (the app's start-up): open the broker
        connection, load Celery's result backend and declare the queues. The first send paid for
        these: ~30 ms alone, 70-140 ms in a process serving a burst (benchmarks/README.md, "Fourth
        round"). Best effort: a broker that is down is logged, and each submission tries again."""
        try:
            self._app.backend  # noqa: B018 (a lazy property: loading it scans entry points, imports)
            with self._app.producer_or_acquire() as producer:
                producer.connection.ensure_connection(max_retries=1)
                for target in Target:
                    producer.maybe_declare(self._app.amqp.queues[self._settings.queue_for(target.value)])
        except Exception as exc:  # noqa: BLE001 (logged, not raised: kombu, redis-py and sockets each raise their own)
            log.warning("the broker is unreachable at start-up (%s: %s); submissions will try again",
                        type(exc).__name__, exc)

    def job_created(self, job_id: int, target: str) -> None:
        queue = self._settings.queue_for(target)
        try:
            self._app.send_task(RUN_JOB_TASK, args=[job_id], queue=queue)
        except Exception as exc:  # kombu raises OperationalError, redis-py its own, sockets OSError
            raise DispatchError(f"could not queue job {job_id} on {queue!r}: {type(exc).__name__}") from exc

    def close(self) -> None:
        self._app.close()
