"""The workers' metrics (``prometheus_client``): what a job waited, what its evaluations cost.

Defined once per process on prometheus_client's default registry; the runner, the evaluator and
the recorder update them. How they reach Prometheus depends on the topology (docs/deploy.md,
"Metrics"):

- **Embedded** (``kernelloop up``): ``up`` gives its workers and its API one multi-process
  directory (``PROMETHEUS_MULTIPROC_DIR``); each worker writes its values there and the API's
  ``/metrics`` aggregates them with its own. Nothing to scrape but the API.
- **Distributed** (Celery workers on GPU hosts): each worker process serves its own metrics on
  ``KERNELLOOP_WORKER_METRICS_PORT`` (`serve_worker_metrics`), one scrape target per worker.
  No push gateway: a worker is a long-lived process, which is what pull scraping is for.

Labels stay few and bounded (target, depth, status, outcome): never a job id.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram, start_http_server

__all__ = [
    "COMPILE_SECONDS",
    "EVALUATION_SECONDS",
    "GPU_SECONDS",
    "INFRA_FAILURES",
    "JOBS",
    "LLM_COST",
    "LLM_TOKENS",
    "QUEUE_WAIT_SECONDS",
    "job_running",
    "serve_worker_metrics",
]

log = logging.getLogger(__name__)

#: From a second (an idle worker's poll) to hours (a queue behind long jobs).
QUEUE_WAIT_BUCKETS_S = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
#: A compile takes 1 s (nvcc of a kernel alone) to minutes (torch headers on two cores).
COMPILE_BUCKETS_S = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 90, 120, 180, 300, 600)
#: An evaluation: a cached compile and a check (seconds) to a cold build and a long timing run.
EVALUATION_BUCKETS_S = (1, 2.5, 5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 1200)

QUEUE_WAIT_SECONDS = Histogram(
    "kernelloop_worker_queue_wait_seconds", "Time from a job's creation to its claim by a worker.",
    ("target",), buckets=QUEUE_WAIT_BUCKETS_S,
)
JOBS = Counter("kernelloop_worker_jobs", "Jobs run by the workers, by how the run ended.",
               ("target", "kind", "outcome"))
RUNNING = Gauge("kernelloop_worker_jobs_running", "Jobs the workers are running now.", ("target",),
                multiprocess_mode="livesum")
COMPILE_SECONDS = Histogram(
    "kernelloop_worker_compile_seconds", "Candidate builds that ran (cached builds excluded), by result.",
    ("target", "ok"), buckets=COMPILE_BUCKETS_S,
)
EVALUATION_SECONDS = Histogram(
    "kernelloop_worker_evaluation_seconds", "Wall time of one evaluation (compile, check, timing), by depth and "
    "verdict status; infra failures count under status error.", ("target", "depth", "status"),
    buckets=EVALUATION_BUCKETS_S,
)
GPU_SECONDS = Counter("kernelloop_worker_gpu_seconds", "Seconds of GPU evaluations charged to jobs (cuda only).")
INFRA_FAILURES = Counter("kernelloop_worker_infra_failures", "Evaluations that failed for our reasons (retried).",
                         ("target",))
LLM_TOKENS = Counter("kernelloop_worker_llm_tokens", "LLM tokens used by the agents, input and output.",
                     ("direction",))
LLM_COST = Counter("kernelloop_worker_llm_cost_usd", "LLM cost of the agents' messages, in US dollars.")


@contextmanager
def job_running(target: str) -> Iterator[None]:
    """Counts the job as running for the duration of the block."""
    gauge = RUNNING.labels(target)
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


def serve_worker_metrics(port: int, host: str) -> None:
    """Serve this process's metrics on ``host:port`` (a daemon thread; the distributed worker's exporter)."""
    start_http_server(port, addr=host)
    log.info("worker metrics on http://%s:%d/metrics", host, port)
