"""`make_celery`: builds the Celery app of the distributed mode, and nothing else.

No task bodies here (`worker.tasks` registers them on the app it is given) and nothing that
imports the harness or torch: the Celery process never initialises CUDA (docs/architecture.md, "Processes").
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from config import Settings

__all__ = ["CPU_QUEUE", "make_celery", "queues_for"]

CPU_QUEUE = "cpu"
#: Redis re-delivers an unacknowledged message after this long; with ``acks_late`` a job runs
#: unacknowledged, so keep it above the longest job. A re-delivery is harmless anyway: the task
#: claims its job by id only while it is queued.
_MIN_VISIBILITY_TIMEOUT_S = 3600


def queues_for(settings: Settings) -> tuple[str, ...]:
    """The queues of this deployment: ``cpu`` and ``gpu-<gpu_type>``."""
    return (CPU_QUEUE, settings.queue_for("cuda"))


def make_celery(settings: Settings, *, broker_url: str | None = None) -> Celery:
    """The Celery app: Redis broker, JSON only, late acks, one job at a time per worker process.

    Args:
        settings: the service settings (``broker_url``, ``gpu_type``).
        broker_url: overrides ``settings.broker_url``.

    Raises:
        ValueError: no broker URL: that is the embedded mode, which runs without Celery
            (`worker.embedded`).
    """
    broker = broker_url or settings.broker_url
    if not broker:
        raise ValueError("no broker_url: the embedded mode runs without Celery (see worker.embedded)")
    app = Celery("kernelloop", broker=broker, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        # Results live in the database; the broker only carries job ids.
        task_ignore_result=True,
        # Acknowledge after the job ran, and take one message at a time: a worker never holds a
        # second job hostage while its GPU is busy with the first.
        task_acks_late=True,
        task_reject_on_worker_lost=False,
        worker_prefetch_multiplier=1,
        worker_concurrency=1,
        # One process per GPU: the task runs in the worker's main thread, beside the lease
        # heartbeat and the reaper threads (no fork after threads, no pool of children).
        worker_pool="solo",
        task_queues=tuple(Queue(name) for name in queues_for(settings)),
        task_default_queue=CPU_QUEUE,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": max(_MIN_VISIBILITY_TIMEOUT_S, int(2 * settings.default_wall_clock_s)),
        },
        worker_hijack_root_logger=False,
    )
    return app
