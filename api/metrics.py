"""The API's metrics through ``prometheus_client``: request counters, a latency histogram, live SSE
streams, failed dispatches, the store's counts read at scrape time, and, in multi-process mode,
every other process's metrics (more API processes, the embedded workers).

Two modes, chosen by prometheus_client itself from ``PROMETHEUS_MULTIPROC_DIR`` when it is first
imported:

- **One process** (tests, ``kernelloop serve`` alone): one `RequestMetrics` per app, each with
  a registry of its own, so two apps in one process (tests) never share counters.
- **Multi-process** (``serve --workers N`` and ``up`` set the directory for their children, see
  `cli.service`): every process writes its values to memory-mapped files in the directory; a
  scrape of any API process aggregates all of them (`MultiProcessCollector`), so ``/metrics``
  answers the same whichever process the kernel gave the connection to, and, in ``up``, also
  carries the embedded workers' metrics (`worker.metrics`: queue wait, compile and evaluation
  seconds, tokens, cost, GPU seconds). A process that died leaves its counters (totals must not
  drop when a process is restarted) but its live gauges are removed at the next scrape
  (`forget_dead_processes`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from store import StoreCounts

__all__ = [
    "LATENCY_BUCKETS_S",
    "MULTIPROC_ENV",
    "RequestMetrics",
    "exposition",
    "forget_dead_processes",
    "multiprocess_dir",
]

#: prometheus_client's own switch: the directory of the processes' value files.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Upper bounds (seconds) of the request-latency histogram: API calls are meant to answer in
#: milliseconds (p99 submission under 250 ms), so the resolution is there.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: The value files of gauges that only count while their process lives (``livesum``/``liveall``…).
_LIVE_GAUGE_FILE = re.compile(r"^gauge_live[a-z]+_(\d+)\.db$")


def multiprocess_dir() -> Path | None:
    """The multi-process directory, when this process runs in that mode."""
    value = os.environ.get(MULTIPROC_ENV)
    return Path(value) if value else None


class RequestMetrics:
    """Counts requests by (method, route template, status) and times them to the response start.

    Time to the response start, not to its end: an SSE stream lasts minutes and would drown the
    histogram; what a client waits for is the headers.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "kernelloop_http_requests", "HTTP requests answered, by route template and status.",
            ("method", "route", "status"), registry=self.registry,
        )
        self._latency = Histogram(
            "kernelloop_http_request_duration_seconds", "Time from a request's arrival to its response headers.",
            ("method", "route"), buckets=LATENCY_BUCKETS_S, registry=self.registry,
        )
        # livesum: the streams open now in the processes alive now.
        self._streams = Gauge("kernelloop_sse_streams", "Event streams open now.", registry=self.registry,
                              multiprocess_mode="livesum")
        self._dispatch_failures = Counter(
            "kernelloop_dispatch_failures", "Jobs the broker refused (answered 503, job cancelled).",
            registry=self.registry,
        )

    def observe(self, *, method: str, route: str, status: int, seconds: float) -> None:
        self._requests.labels(method, route, str(status)).inc()
        self._latency.labels(method, route).observe(seconds)

    def stream_opened(self) -> None:
        self._streams.inc()

    def stream_closed(self) -> None:
        self._streams.dec()

    def dispatch_failed(self) -> None:
        self._dispatch_failures.inc()


class _StoreCollector:
    """The store's counts of one scrape as gauges; every known state and status appears, zero or not."""

    def __init__(self, counts: StoreCounts, job_states: Iterable[str], statuses: Iterable[str]) -> None:
        self._counts = counts
        self._states = tuple(job_states)
        self._statuses = tuple(statuses)

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("kernelloop_jobs", "Jobs stored, by state.", labels=("state",))
        for state in self._states:
            jobs.add_metric((state,), self._counts.jobs_by_state.get(state, 0))
        yield jobs
        attempts = GaugeMetricFamily("kernelloop_attempts", "Attempts stored, by verdict status.", labels=("status",))
        for status in self._statuses:
            attempts.add_metric((status,), self._counts.attempts_by_status.get(status, 0))
        yield attempts
        yield GaugeMetricFamily("kernelloop_job_events", "Events in the streams of the jobs stored.",
                                value=self._counts.events)


class _Forward:
    """Another registry's metrics, collected into the scrape's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        return iter(self._registry.collect())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def forget_dead_processes(directory: Path) -> list[int]:
    """Remove the live gauges of processes that died (their counters and histograms stay).

    Every API process scrapes the same directory on one machine, so any of them can tell which
    pids are gone. A pid reused by a new process keeps the old one's live gauges until that one
    exits too: harmless for the gauges kept here (streams open, jobs running), which a new
    process would not have written under the old pid's file anyway.

    Returns:
        The pids whose live gauges were removed.
    """
    dead = sorted({
        int(match.group(1))
        for entry in directory.iterdir()
        if (match := _LIVE_GAUGE_FILE.match(entry.name)) and not _alive(int(match.group(1)))
    })
    for pid in dead:
        mark_process_dead(pid, str(directory))
    return dead


def exposition(
    metrics: RequestMetrics,
    counts: StoreCounts,
    *,
    job_states: Iterable[str],
    statuses: Iterable[str],
    accept: str | None = None,
) -> tuple[bytes, str]:
    """The body and content type of a scrape (OpenMetrics when the scraper asks for it)."""
    registry = CollectorRegistry(auto_describe=False)
    directory = multiprocess_dir()
    if directory is not None:
        forget_dead_processes(directory)
        MultiProcessCollector(registry, path=str(directory))
    else:
        registry.register(_Forward(metrics.registry))
    registry.register(_StoreCollector(counts, job_states, statuses))
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
