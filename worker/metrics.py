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

Labels stay few and bounded (target, depth, status, outcome, stage, kind): never a job id.

Time to verdict: every evaluation's stages (`vocabulary.stages.StageSeconds`) go into
``kernelloop_worker_stage_seconds`` by target and stage, and each verdict counts once in
``kernelloop_worker_verdicts_total`` by target and attempt kind (`vocabulary.verdict.attempt_kind`),
its lane seconds (`StageSeconds.lane`: the stages that hold the device) in
``kernelloop_worker_lane_seconds_total``: verdicts per GPU-hour is the ratio of their rates
(docs/deploy.md, "Metrics", has the PromQL).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from vocabulary.verdict import Verdict, attempt_kind

__all__ = [
    "COMPILE_SECONDS",
    "EVALUATION_SECONDS",
    "GPU_SECONDS",
    "INFRA_FAILURES",
    "JOBS",
    "LANE_SECONDS",
    "LLM_COST",
    "LLM_TOKENS",
    "QUEUE_WAIT_SECONDS",
    "STAGE_SECONDS",
    "VERDICTS",
    "job_running",
    "observe_verdict",
    "serve_worker_metrics",
]

log = logging.getLogger(__name__)

#: From a second (an idle worker's poll) to hours (a queue behind long jobs).
QUEUE_WAIT_BUCKETS_S = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
#: A compile takes 1 s (nvcc of a kernel alone) to minutes (torch headers on two cores).
COMPILE_BUCKETS_S = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 90, 120, 180, 300, 600)
#: An evaluation: a cached compile and a check (seconds) to a cold build and a long timing run.
EVALUATION_BUCKETS_S = (1, 2.5, 5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 1200)
#: One stage of an evaluation: tens of milliseconds (a load) to minutes (a cold compile); fine
#: around the seconds that decide the lane's throughput, so p50 and p95 land between close bounds.
STAGE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180,
                   300, 600)

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
STAGE_SECONDS = Histogram(
    "kernelloop_worker_stage_seconds", "Seconds of each referee stage that ran in an evaluation (a cached one runs "
    "none).", ("target", "stage"), buckets=STAGE_BUCKETS_S,
)
VERDICTS = Counter("kernelloop_worker_verdicts", "Verdicts of evaluations, by attempt kind (compile_error, wrong, "
                   "correct, fast, error).", ("target", "kind"))
LANE_SECONDS = Counter("kernelloop_worker_lane_seconds", "Seconds the verdicts held the device lane (reference start, "
                       "baselines, load, correctness, timing; compiles run beside it), by attempt kind.",
                       ("target", "kind"))
GPU_SECONDS = Counter("kernelloop_worker_gpu_seconds", "Seconds of GPU evaluations charged to jobs (cuda only).")
INFRA_FAILURES = Counter("kernelloop_worker_infra_failures", "Evaluations that failed for our reasons (retried).",
                         ("target",))
LLM_TOKENS = Counter("kernelloop_worker_llm_tokens", "LLM tokens used by the agents, input and output.",
                     ("direction",))
LLM_COST = Counter("kernelloop_worker_llm_cost_usd", "LLM cost of the agents' messages, in US dollars.")


def observe_verdict(target: str, verdict: Verdict) -> None:
    """Count one evaluation's verdict: its stages' seconds, its kind and its lane seconds."""
    for stage, seconds in verdict.stage_seconds.items():
        STAGE_SECONDS.labels(target, stage).observe(seconds)
    kind = attempt_kind(verdict).value
    VERDICTS.labels(target, kind).inc()
    LANE_SECONDS.labels(target, kind).inc(verdict.stage_seconds.lane)


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
