"""Prometheus text exposition (format 0.0.4), hand-written: request counters, a latency
histogram, live SSE streams, and the store's counts read at scrape time (`store.read_store_counts`).

One `RequestMetrics` per app (on ``app.state``), no process-global registry, so two apps in one
process (tests) never share counters.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping

from store import StoreCounts

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS_S", "RequestMetrics", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Upper bounds (seconds) of the request-latency histogram: API calls are meant to answer in
#: milliseconds (p99 submission under 250 ms), so the resolution is there.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Mapping[str, str]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{int(value)}"


class RequestMetrics:
    """Counts requests by (method, route template, status) and times them to the response start.

    Time to the response start, not to its end: an SSE stream lasts minutes and would drown the
    histogram; what a client waits for is the headers.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str], int] = defaultdict(int)
        self._buckets: dict[tuple[str, str], list[int]] = {}
        self._sums: dict[tuple[str, str], float] = defaultdict(float)
        self._streams = 0
        self._dispatch_failures = 0

    def observe(self, *, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self._requests[(method, route, str(status))] += 1
            counts = self._buckets.setdefault((method, route), [0] * (len(LATENCY_BUCKETS_S) + 1))
            for i, bound in enumerate(LATENCY_BUCKETS_S):
                if seconds <= bound:
                    counts[i] += 1
            counts[-1] += 1
            self._sums[(method, route)] += seconds

    def stream_opened(self) -> None:
        with self._lock:
            self._streams += 1

    def stream_closed(self) -> None:
        with self._lock:
            self._streams -= 1

    def dispatch_failed(self) -> None:
        with self._lock:
            self._dispatch_failures += 1

    def lines(self) -> Iterable[str]:
        with self._lock:
            requests = dict(self._requests)
            buckets = {k: list(v) for k, v in self._buckets.items()}
            sums = dict(self._sums)
            streams, failures = self._streams, self._dispatch_failures
        yield "# HELP kernelloop_http_requests_total HTTP requests answered, by route template and status."
        yield "# TYPE kernelloop_http_requests_total counter"
        for (method, route, status), count in sorted(requests.items()):
            labels = _labels({"method": method, "route": route, "status": status})
            yield f"kernelloop_http_requests_total{labels} {count}"
        name = "kernelloop_http_request_duration_seconds"
        yield f"# HELP {name} Time from a request's arrival to its response headers."
        yield f"# TYPE {name} histogram"
        for (method, route), counts in sorted(buckets.items()):
            base = {"method": method, "route": route}
            for bound, count in zip((*map(str, LATENCY_BUCKETS_S), "+Inf"), counts, strict=True):
                yield f"{name}_bucket{_labels({**base, 'le': bound})} {count}"
            yield f"{name}_sum{_labels(base)} {_number(sums[(method, route)])}"
            yield f"{name}_count{_labels(base)} {counts[-1]}"
        yield "# HELP kernelloop_sse_streams Event streams open now."
        yield "# TYPE kernelloop_sse_streams gauge"
        yield f"kernelloop_sse_streams {streams}"
        yield "# HELP kernelloop_dispatch_failures_total Jobs the broker refused (answered 503, job cancelled)."
        yield "# TYPE kernelloop_dispatch_failures_total counter"
        yield f"kernelloop_dispatch_failures_total {failures}"


def render(requests: RequestMetrics, counts: StoreCounts, *, job_states: Iterable[str], statuses: Iterable[str]) -> str:
    """The whole exposition; every known state and status appears, zero or not."""
    lines = list(requests.lines())
    lines += ["# HELP kernelloop_jobs Jobs stored, by state.", "# TYPE kernelloop_jobs gauge"]
    lines += [f"kernelloop_jobs{_labels({'state': s})} {counts.jobs_by_state.get(s, 0)}" for s in job_states]
    lines += ["# HELP kernelloop_attempts Attempts stored, by verdict status.", "# TYPE kernelloop_attempts gauge"]
    lines += [f"kernelloop_attempts{_labels({'status': s})} {counts.attempts_by_status.get(s, 0)}" for s in statuses]
    lines += [
        "# HELP kernelloop_job_events Events in the streams of the jobs stored.",
        "# TYPE kernelloop_job_events gauge",
        f"kernelloop_job_events {counts.events}",
    ]
    return "\n".join(lines) + "\n"
