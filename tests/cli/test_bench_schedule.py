"""``bench`` within a key's quota: 5 problems through a key that may run 2 jobs at once complete,
an interrupted bench (SIGTERM) resumes without submitting anything twice, and the report says
where its figures were measured. The test plays the worker: it claims the jobs the command
queued, stores attempts with real verdicts and finishes them, one at a time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from store import Job, JobState, Target, claim_next_job, create_api_key, session_scope
from tests.support.cli import api_env, pythonpath, run, start
from tests.support.dashboard import WORKER_ID, Service, add_attempt, finish, live_service, verdict
from tests.support.paths import REPO

pytestmark = pytest.mark.timeout(240)

PROBLEMS = ("level1/softmax", "level1/gelu_tanh", "level1/argmax", "level1/layer_norm", "level1/max_reduction")
DEVICE = "AMD EPYC 9654 (test cpu)"


def _two_job_key(service: Service) -> str:
    with session_scope(service.factory) as session:
        return create_api_key(session=session, name="bench", owner="bench", max_concurrent_jobs=2,
                              max_jobs_per_day=100).plaintext


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite.txt"
    suite.write_text("\n".join(PROBLEMS) + "\n")
    return suite


def _jobs(service: Service) -> dict[int, JobState]:
    with session_scope(service.factory) as session:
        return {j.id: j.state for j in session.scalars(select(Job).order_by(Job.id))}


def _active(service: Service) -> int:
    with session_scope(service.factory) as session:
        return int(session.scalar(select(func.count()).select_from(Job).where(
            Job.state.in_((JobState.QUEUED, JobState.RUNNING)))) or 0)


def _claim(service: Service, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while True:
        with session_scope(service.factory) as session:
            job = claim_next_job(session=session, worker_id=WORKER_ID, target=Target.CPU, lease_seconds=600)
            if job is not None:
                return job.id
        assert time.monotonic() < deadline, f"no job was queued; jobs: {_jobs(service)}"
        time.sleep(0.05)


def _complete(service: Service, job_id: int, speedup: float) -> None:
    add_attempt(service.factory, job_id, verdict(median_ms=4.0 / speedup, eager_ms=4.0, compile_ms=3.0,
                                                 device=DEVICE, target="cpu"), tokens=1000, cost_usd=0.01)
    finish(service.factory, job_id)


def _wait_exit(process: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    stdout, stderr = process.communicate(timeout=timeout)
    return stdout, stderr


def test_five_problems_through_a_two_job_key_complete_with_provenance(service: Service, tmp_path: Path) -> None:
    env = api_env(service.base_url, _two_job_key(service), tmp_path)
    out_dir = tmp_path / "report"
    # No --target: the server picks (this test service's default is cuda; the report must say so).
    process = start(["bench", str(_suite(tmp_path)), "--out", str(out_dir), "--poll", "0.1", "--json"], env,
                    tmp_path)
    most_active = 0
    for i in range(len(PROBLEMS)):
        with session_scope(service.factory) as session:
            job = claim_next_job(session=session, worker_id=WORKER_ID, target=Target.CUDA, lease_seconds=600)
        while job is None:
            assert process.poll() is None, process.communicate()
            time.sleep(0.05)
            with session_scope(service.factory) as session:
                job = claim_next_job(session=session, worker_id=WORKER_ID, target=Target.CUDA, lease_seconds=600)
        job_id = job.id
        time.sleep(0.3)  # time for the bench to try (and be refused) a third submission
        most_active = max(most_active, _active(service))
        _complete(service, job_id, speedup=1.0 + 0.5 * i)
    stdout, stderr = _wait_exit(process)
    assert process.returncode == 0, stderr
    assert most_active == 2, "the bench kept the key's 2 slots busy, never more"
    assert "concurrent jobs are running" in stderr and "wait for a free slot" in stderr
    assert len(_jobs(service)) == 5

    report = json.loads(stdout)
    assert report == json.loads((out_dir / "bench.json").read_text())
    assert report["finished"] is True and report["interrupted"] is False
    assert [p["problem"] for p in report["problems"]] == list(PROBLEMS)
    assert all(p["state"] == "succeeded" and p["correct"] for p in report["problems"])
    assert report["summary"]["fast_p"]["1.5"] == pytest.approx(3 / 5)
    provenance = report["provenance"]
    assert provenance["target"] == report["target"] == "cuda"  # what the server chose, not "(server default target)"
    assert provenance["device"] == DEVICE and provenance["torch"] == "2.11.0" and provenance["cuda"] == "13.0"
    assert provenance["harness"] == "0.1.0" and provenance["measured_jobs"] == 5
    assert provenance["client"]["kernelloop"] == "0.1.0" and provenance["client"]["torch"]
    assert all(p["provenance"]["device"] == DEVICE for p in report["problems"])
    markdown = (out_dir / "bench.md").read_text()
    assert f"(cuda, {DEVICE})" in markdown and f"| device | {DEVICE} |" in markdown
    assert "server default target" not in markdown


def _shows(report_path: Path, *, third: int) -> bool:
    """Whether the saved report holds the third job and the first one's end."""
    first, _, queued = json.loads(report_path.read_text())["problems"][:3]
    return bool(queued.get("job_id") == third and first.get("state") == "succeeded")


def test_an_interrupted_bench_resumes_without_submitting_twice(service: Service, tmp_path: Path) -> None:
    env = api_env(service.base_url, _two_job_key(service), tmp_path)
    out_dir = tmp_path / "report"
    report_path = out_dir / "bench.json"
    process = start(["bench", str(_suite(tmp_path)), "--target", "cpu", "--out", str(out_dir), "--poll", "0.1"],
                    env, tmp_path)
    first, second = _claim(service), _claim(service)
    _complete(service, first, speedup=2.0)
    third = _claim(service)  # submitted once the first slot freed
    # The report holds the third job and the first one's end. On a loaded host the first can end
    # before the command tried the third at all: it then submits the third at once and reads the
    # first's end at its next poll, so both are waited for.
    deadline = time.monotonic() + 30
    while not _shows(report_path, third=third):
        assert time.monotonic() < deadline, report_path.read_text()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = _wait_exit(process)
    assert process.returncode == 130, stderr
    assert f"kernelloop bench --resume {report_path}" in stderr

    partial = json.loads(report_path.read_text())
    assert partial["finished"] is False and partial["interrupted"] is True
    assert [p["job_id"] for p in partial["problems"]] == [first, second, third, None, None]
    assert [p["state"] for p in partial["problems"]][3:] == ["not submitted", "not submitted"]
    assert partial["problems"][0]["correct"] is True, partial["problems"][0]
    assert "| level1/layer_norm | — | not submitted |" in (out_dir / "bench.md").read_text()

    # A report saved between reading a job's end and its verdict's provenance (an interrupt at that
    # moment): the resumed bench reads it then.
    partial["problems"][0]["provenance"] = None
    report_path.write_text(json.dumps(partial))
    # While the bench is away, a job ends; then the bench resumes from its report.
    _complete(service, second, speedup=1.2)
    process = start(["bench", "--resume", str(report_path), "--poll", "0.1"], env, tmp_path)
    fourth = _claim(service)
    _complete(service, third, speedup=0.9)
    fifth = _claim(service)
    _complete(service, fourth, speedup=1.6)
    _complete(service, fifth, speedup=1.1)
    _, stderr = _wait_exit(process)
    assert process.returncode == 0, stderr
    assert "1 problems done, 2 jobs to re-attach, 2 to submit" in stderr

    assert sorted(_jobs(service)) == [first, second, third, fourth, fifth], "nothing submitted twice"
    final = json.loads(report_path.read_text())
    assert final["finished"] is True and final["interrupted"] is False
    assert [p["job_id"] for p in final["problems"]] == [first, second, third, fourth, fifth]
    assert [p["correct"] for p in final["problems"]] == [True] * 5
    assert final["target"] == "cpu" and final["provenance"]["target"] == "cpu"
    assert final["provenance"]["device"] == DEVICE and final["provenance"]["measured_jobs"] == 5
    assert final["created_at"] == partial["created_at"]


def test_bench_through_a_real_worker_with_a_two_job_key(tmp_path: Path) -> None:
    """The same bench against the API and a real embedded worker process (`python -m
    benchmarks.load_worker embedded`: the worker `kernelloop up` starts, with the agent replaced by
    the load double, a short scripted job whose attempt is a timed pass; no LLM, no compile)."""
    with live_service(tmp_path / "service", default_target="cpu") as service:
        data = tmp_path / "service"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("KERNELLOOP_") or k.startswith("KERNELLOOP_TEST")}
        env.update(PYTHONPATH=pythonpath(), HOME=str(tmp_path / "worker-home"), KERNELLOOP_DATA_DIR=str(data),
                   KERNELLOOP_DATABASE_URL=f"sqlite:///{data / 'kernelloop.db'}",
                   KERNELLOOP_CACHE_DIR=str(tmp_path / "cache"), KERNELLOOP_POLL_INTERVAL_S="0.1",
                   KERNELLOOP_WARM_HEADERS="false")
        worker = subprocess.Popen([sys.executable, "-m", "benchmarks.load_worker", "embedded"], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            client_env = api_env(service.base_url, _two_job_key(service), tmp_path)
            done = run(["bench", str(_suite(tmp_path)), "--out", str(tmp_path / "report"), "--poll", "0.2",
                        "--json"], client_env, tmp_path, timeout=180)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["finished"] and [p["state"] for p in report["problems"]] == ["succeeded"] * 5
        assert report["summary"]["fast_p"]["1"] == 1.0  # the double's kernel: 1 ms against 2 ms eager
        assert report["provenance"]["target"] == "cpu" and report["provenance"]["device"] == "cpu"
        assert report["provenance"]["harness"] == "load-double"
        assert "wait for a free slot" in done.stderr
        assert len(_jobs(service)) == 5
