"""``/metrics`` in multi-process mode, for real: ``kernelloop serve --workers 2`` (two API processes
on one port), a worker process writing into the same directory, and dead processes.

Whichever API process answers a scrape, it reports the sum over every process: requests counted
by both API processes, the worker's tokens, and none of the live gauges of a process that died.
A worker's time to verdict (stage seconds, verdicts by kind, lane seconds) reaches the scrape in
both topologies: through the API in multi-process mode, and from the worker's own exporter.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from store.migrate import upgrade
from tests.support.network import free_port, wait_healthy
from tests.support.paths import REPO

REQUESTS = 40

pytestmark = pytest.mark.timeout(180)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELLOOP_", "PROMETHEUS_"))}
    url = f"sqlite:///{tmp_path / 'kernelloop.db'}"
    upgrade(url)
    return {**env, "KERNELLOOP_DATA_DIR": str(tmp_path), "KERNELLOOP_DATABASE_URL": url, **extra}


@contextmanager
def _serve(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    port = free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "cli.service", "serve", "--workers", "2", "--port", str(port), "--no-access-log"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, serve, log_path)
        yield base, serve, log_path
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(base: str) -> Samples:
    text = httpx.get(f"{base}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def _problems_requests(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    key = ("kernelloop_http_requests_total", (("method", "GET"), ("route", "/problems"), ("status", "200")))
    return samples.get(key, 0.0)


def _per_process_requests(directory: Path) -> dict[int, float]:
    """``GET /problems`` requests counted in each process's own counter file."""
    counts = {}
    for path in directory.glob("counter_*.db"):
        pid = int(re.fullmatch(r"counter_(\d+)\.db", path.name).group(1))  # type: ignore[union-attr]
        for metric in MultiProcessCollector.merge([str(path)], accumulate=True):
            for s in metric.samples:
                if s.name == "kernelloop_http_requests_total" and s.labels.get("route") == "/problems":
                    counts[pid] = counts.get(pid, 0.0) + s.value
    return counts


def test_every_api_process_reports_the_sum_of_all_processes(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    env = _env(tmp_path, PROMETHEUS_MULTIPROC_DIR=str(directory))
    with _serve(tmp_path, env) as (base, _, _):
        for _ in range(REQUESTS):  # a new connection each: the kernel spreads them over the two processes
            assert httpx.get(f"{base}/problems").status_code == 200
        # Both processes answered some (each counts only its own in its file) …
        per_process = _per_process_requests(directory)
        assert len(per_process) == 2 and all(v > 0 for v in per_process.values()), per_process
        assert sum(per_process.values()) == REQUESTS
        # … and a worker on this machine wrote its metrics into the same directory, then died
        # while it counted a job as running.
        worker = subprocess.run(
            [sys.executable, "-c", "from worker import metrics\n"
             "metrics.LLM_TOKENS.labels('in').inc(1234)\nmetrics.RUNNING.labels('cpu').inc()\n"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
        )
        assert worker.returncode == 0, worker.stderr
        assert list(directory.glob("gauge_livesum_*.db"))
        for _ in range(6):  # whichever process answers, the same sums
            samples = _samples(base)
            assert _problems_requests(samples) == REQUESTS
            assert samples[("kernelloop_worker_llm_tokens_total", (("direction", "in"),))] == 1234
            assert samples.get(("kernelloop_worker_jobs_running", (("target", "cpu"),)), 0.0) == 0
            assert samples[("kernelloop_sse_streams", ())] == 0
            assert samples[("kernelloop_jobs", (("state", "queued"),))] == 0  # the store's counts too
        # The dead worker's live gauge file is gone; its counters stay (totals never drop).
        live_pids = {int(p.name.split("_")[-1][:-3]) for p in directory.glob("gauge_livesum_*.db")}
        assert worker.returncode == 0 and all(_alive(pid) for pid in live_pids), live_pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_serve_makes_a_metrics_directory_of_its_own_and_removes_it(tmp_path: Path) -> None:
    with _serve(tmp_path, _env(tmp_path)) as (base, _, log_path):
        for _ in range(REQUESTS):
            httpx.get(f"{base}/problems")
        match = re.search(r"metrics of all in\s+(\S+?)\)", log_path.read_text())
        assert match, log_path.read_text()
        directory = Path(match.group(1))
        assert directory.is_dir() and list(directory.glob("counter_*.db"))
        assert all(_problems_requests(_samples(base)) == REQUESTS for _ in range(4))
    assert not directory.exists()


# -- time to verdict ------------------------------------------------------------------------------


def histogram_quantile(q: float, samples: Samples, name: str, **labels: str) -> float:
    """PromQL's ``histogram_quantile(q, NAME_bucket{labels})`` over one scrape: linear within the bucket."""
    buckets = sorted(
        (float(dict(key)["le"]), value) for (metric, key), value in samples.items()
        if metric == f"{name}_bucket" and all(dict(key).get(k) == v for k, v in labels.items())
    )
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    raise AssertionError("unreachable")


def _sum(samples: Samples, name: str) -> float:
    return sum(value for (metric, _), value in samples.items() if metric == name)


def _check_time_to_verdict(samples: Samples) -> None:
    """The four verdicts of `tests.support.metrics_entry`: one of each kind, 10 s of lane time."""
    kinds = {dict(key)["kind"]: value for (metric, key), value in samples.items()
             if metric == "kernelloop_worker_verdicts_total"}
    assert kinds == {"fast": 1, "wrong": 1, "compile_error": 1, "correct": 1}
    lane = {dict(key)["kind"]: value for (metric, key), value in samples.items()
            if metric == "kernelloop_worker_lane_seconds_total"}
    assert lane == {"fast": 3.0, "wrong": 2.0, "compile_error": 0.0, "correct": 5.0}
    # docs/deploy.md: verdicts per GPU-hour = rate(verdicts) / rate(lane seconds) * 3600.
    assert _sum(samples, "kernelloop_worker_verdicts_total") / _sum(
        samples, "kernelloop_worker_lane_seconds_total") * 3600 == 1440
    compile_key = ("kernelloop_worker_stage_seconds_count", (("stage", "compile"), ("target", "cpu")))
    assert samples[compile_key] == 3  # the fourth's build was cached: no compile stage
    assert samples[("kernelloop_worker_stage_seconds_sum", (("stage", "compile"), ("target", "cpu")))] == 75.0
    # p50 of the compiles (20, 25, 30 s): 25 s, in the (20, 30] bucket; p95 in the same.
    p50 = histogram_quantile(0.5, samples, "kernelloop_worker_stage_seconds", target="cpu", stage="compile")
    p95 = histogram_quantile(0.95, samples, "kernelloop_worker_stage_seconds", target="cpu", stage="compile")
    assert 20 < p50 <= 30 and p50 < p95 <= 30
    assert 1.0 < histogram_quantile(0.5, samples, "kernelloop_worker_stage_seconds", target="cpu",
                                    stage="correctness") <= 1.5


def test_a_workers_time_to_verdict_is_in_the_apis_metrics(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    env = _env(tmp_path, PROMETHEUS_MULTIPROC_DIR=str(directory))
    with _serve(tmp_path, env) as (base, _, _):
        worker = subprocess.run([sys.executable, "-m", "tests.support.metrics_entry"], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=120)
        assert worker.returncode == 0, worker.stderr
        for _ in range(4):  # whichever API process answers
            _check_time_to_verdict(_samples(base))


def test_a_distributed_workers_exporter_serves_its_time_to_verdict(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNELLOOP_", "PROMETHEUS_"))}
    worker = subprocess.Popen([sys.executable, "-m", "tests.support.metrics_entry", "--serve", str(port)], cwd=REPO,
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == b"judged\n", worker.stderr
        _check_time_to_verdict(_samples(f"http://127.0.0.1:{port}"))
    finally:
        worker.communicate(timeout=30)  # closes its stdin: it exits
    assert worker.returncode == 0
