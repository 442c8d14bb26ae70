"""Composes one worker process of the distributed mode: Celery app, tasks, database, reaper.

`create_worker_app` is what ``celery -A worker.main worker`` and ``kernelloop worker`` load: the
app from `worker.celery_app.make_celery`, the tasks of `worker.tasks` bound to this process's
context, and a bootstep that runs the lease reaper (`worker.reaper`) beside the consumer, so
jobs of a dead worker are re-queued and re-sent as long as any worker lives; with
``KERNELLOOP_WORKER_METRICS_PORT`` set, another that serves the worker's metrics there
(`worker.metrics`).
"""

from __future__ import annotations

from typing import Any

from celery import Celery, bootsteps

from config import Settings
from harness import HarnessOptions, Referee
from store import Target, make_engine, make_session_factory
from worker.celery_app import make_celery
from worker.lease import check_lease_settings, new_worker_id
from worker.metrics import serve_worker_metrics
from worker.reaper import Dispatch, Reaper
from worker.runner import AgentRunner, RefereeFactory, harness_options_for
from worker.tasks import WorkerContext, celery_dispatch, register_tasks
from worker.warmup import start_header_warmup

__all__ = ["create_worker_app", "target_for_queue"]


def target_for_queue(queue: str) -> Target:
    """The target a queue's jobs run on: ``cpu`` for ``cpu``, ``cuda`` for every ``gpu-<type>``."""
    if queue == "cpu":
        return Target.CPU
    if queue.startswith("gpu-"):
        return Target.CUDA
    raise ValueError(f"unknown queue {queue!r}: queues are 'cpu' and 'gpu-<gpu_type>'")


def _reaper_step(reaper: Reaper) -> type[bootsteps.StartStopStep]:
    class LeaseReaperStep(bootsteps.StartStopStep):
        """Runs the lease reaper while the worker consumes."""

        label = "lease reaper"

        def start(self, parent: Any) -> None:
            reaper.start()

        def stop(self, parent: Any) -> None:
            reaper.stop()

    return LeaseReaperStep


def _metrics_step(port: int, host: str) -> type[bootsteps.StartStopStep]:
    class MetricsExporterStep(bootsteps.StartStopStep):
        """Serves the worker's metrics (a daemon thread: it ends with the process)."""

        label = "metrics exporter"

        def start(self, parent: Any) -> None:
            serve_worker_metrics(port, host)

    return MetricsExporterStep


def _warmup_step(options: HarnessOptions, target: Target) -> type[bootsteps.StartStopStep]:
    class HeaderWarmupStep(bootsteps.StartStopStep):
        """Precompiles the torch headers in the background when the worker starts."""

        label = "header warm-up"

        def start(self, parent: Any) -> None:
            start_header_warmup(options, target.value)

    return HeaderWarmupStep


def create_worker_app(
    settings: Settings,
    *,
    target: Target | None = None,
    harness_options: HarnessOptions | None = None,
    run_agent: AgentRunner | None = None,
    referee_factory: RefereeFactory = Referee,
) -> Celery:
    """The Celery app of one worker process, tasks registered and reaper attached.

    Args:
        settings: the service settings (``broker_url`` required).
        target: what this worker runs (default ``settings.worker_target``); it must match the
            queue it consumes (``settings.queue_for(target)``).
        harness_options: overrides the harness options built from the settings (tests).
        run_agent: runs an agent job (default `agent.run_job`; tests and the load run pass their own).
        referee_factory: builds the referees (default `harness.Referee`; the load run's double
            judges nothing).
    """
    check_lease_settings(lease_seconds=settings.lease_seconds, heartbeat_seconds=settings.heartbeat_seconds)
    target = Target(target or settings.worker_target)
    app = make_celery(settings)
    session_factory = make_session_factory(make_engine(settings.resolved_database_url))
    queue = settings.queue_for(target.value)
    context = WorkerContext(settings=settings, session_factory=session_factory,
                            worker_id=new_worker_id(f"celery-{queue}"), target=target,
                            harness_options=harness_options, run_agent=run_agent,
                            referee_factory=referee_factory)
    register_tasks(app, context)
    dispatch: Dispatch = celery_dispatch(app, settings)
    reaper = Reaper(session_factory=session_factory, max_requeues=settings.max_requeues,
                    interval_s=settings.reaper_interval_s, dispatch=dispatch,
                    redispatch_after_s=settings.redispatch_after_s)
    app.steps["worker"].add(_reaper_step(reaper))
    if settings.worker_metrics_port is not None:
        app.steps["worker"].add(_metrics_step(settings.worker_metrics_port, settings.worker_metrics_host))
    if settings.warm_headers and harness_options is None:
        app.steps["worker"].add(_warmup_step(harness_options_for(settings), target))
    return app
