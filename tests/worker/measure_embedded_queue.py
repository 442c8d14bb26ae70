"""Measure the embedded mode's two queue options; the figures are in docs/deploy.md.

    python tests/worker/measure_embedded_queue.py [--jobs 200] [--rate 50] [--poll 0.5]

Both options run the same way: a producer (standing in for the API) creates jobs in a migrated
SQLite file (WAL) at ``--rate`` per second; one worker process takes them and finishes each at
once (a no-op runner, so only the queue is measured):

- ``db``: the database is the queue; the worker polls `store.claim_next_job` every ``--poll`` s.
- ``celery-sqla``: Celery with kombu's SQLAlchemy transport on a second SQLite file
  (``sqla+sqlite://``), polled every ``--poll`` s; the producer commits the job, then sends
  ``kernelloop.run_job``; the worker is a Celery solo worker that claims the job by id.

``memory://`` is not measured: it only carries messages inside one process, and ``up`` runs the
API and its workers (one per GPU) as separate processes.

Reported: the producer's enqueue time (commit, plus the send), the pickup latency (queued →
claimed, from the job's events), the drain time, and the worker's CPU use while idle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from celery import Celery  # noqa: E402

from store import (  # noqa: E402
    JobState,
    Target,
    claim_job,
    claim_next_job,
    create_job,
    events_after,
    finish_job,
    get_or_create_problem,
    make_engine,
    make_session_factory,
    session_scope,
)
from store.migrate import upgrade  # noqa: E402

TASK = "kernelloop.run_job"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the worker processes -----------------------------------------------------------------------
def worker_db(url: str, poll: float) -> None:
    factory = make_session_factory(make_engine(url))
    while True:
        with session_scope(factory) as session:
            job = claim_next_job(session=session, worker_id="w", target=Target.CPU, lease_seconds=60)
            if job is not None:
                finish_job(session=session, job_id=job.id, worker_id="w", state=JobState.SUCCEEDED)
        if job is None:
            time.sleep(poll)


def celery_app(broker: str, poll: float) -> Celery:
    # kombu's SQLAlchemy transport hands every transport option to create_engine(), which refuses
    # ``polling_interval``: set the transport's class attribute instead.
    from kombu.transport.sqlalchemy import Transport

    Transport.polling_interval = poll
    app = Celery("measure", broker=broker, set_as_current=False)
    app.conf.update(task_serializer="json", accept_content=["json"], task_ignore_result=True, task_acks_late=True,
                    worker_prefetch_multiplier=1, worker_hijack_root_logger=False)
    return app


def worker_celery(url: str, broker: str, poll: float) -> None:
    factory = make_session_factory(make_engine(url))
    app = celery_app(broker, poll)

    @app.task(name=TASK)
    def run_job(job_id: int) -> None:
        with session_scope(factory) as session:
            if claim_job(session=session, job_id=job_id, worker_id="w", lease_seconds=60) is not None:
                finish_job(session=session, job_id=job_id, worker_id="w", state=JobState.SUCCEEDED)

    app.worker_main(["worker", "-Q", "cpu", "-c", "1", "--pool", "solo", "--loglevel", "WARNING",
                     "--without-gossip", "--without-mingle", "--without-heartbeat"])


# -- the producer ------------------------------------------------------------------------------
def measure(mode: str, *, jobs: int, rate: float, poll: float, idle_s: float) -> dict[str, float | str]:
    directory = Path(tempfile.mkdtemp(prefix=f"kl-queue-{mode}-"))
    url = f"sqlite:///{directory / 'kernelloop.db'}"
    broker = f"sqla+sqlite:///{directory / 'broker.db'}"
    upgrade(url)
    factory = make_session_factory(make_engine(url))
    with session_scope(factory) as session:
        problem_id = get_or_create_problem(session=session, source="class Model: ...", declarations={}).id
    argv = [sys.executable, __file__, f"worker-{mode}", url, broker, str(poll)]
    worker = subprocess.Popen(argv, cwd=REPO)
    app = celery_app(broker, poll) if mode == "celery" else None
    try:
        time.sleep(3.0)  # the worker is up and idle
        enqueue_ms: list[float] = []
        ids: list[int] = []
        started = time.perf_counter()
        for i in range(jobs):
            due = started + i / rate
            time.sleep(max(0.0, due - time.perf_counter()))
            t0 = time.perf_counter()
            with session_scope(factory) as session:
                job_id = create_job(session=session, problem_id=problem_id, target=Target.CPU).id
            if app is not None:
                app.send_task(TASK, args=[job_id], queue="cpu")
            enqueue_ms.append(1000 * (time.perf_counter() - t0))
            ids.append(job_id)
        while True:
            with session_scope(factory) as session:
                from sqlalchemy import func, select

                from store import Job

                done = session.scalar(select(func.count()).select_from(Job).where(Job.state == JobState.SUCCEEDED))
            if done == jobs:
                break
            time.sleep(0.05)
        drain_s = time.perf_counter() - started
        pickup_ms = []
        with session_scope(factory) as session:
            for job_id in ids:
                events = {e.payload["state"]: e.created_at for e in events_after(session=session, job_id=job_id)}
                pickup_ms.append(1000 * (events["running"] - events["queued"]).total_seconds())
        cpu_before = _cpu_seconds(worker.pid)
        time.sleep(idle_s)
        idle_cpu_pct = 100 * (_cpu_seconds(worker.pid) - cpu_before) / idle_s
    finally:
        worker.kill()
        worker.wait()
    return {
        "mode": mode, "jobs": jobs, "rate_per_s": rate, "poll_s": poll,
        "enqueue_p50_ms": round(statistics.median(enqueue_ms), 2), "enqueue_p99_ms": round(_pct(enqueue_ms, 0.99), 2),
        "pickup_p50_ms": round(statistics.median(pickup_ms), 1), "pickup_p99_ms": round(_pct(pickup_ms, 0.99), 1),
        "drain_s": round(drain_s, 2), "idle_cpu_pct": round(idle_cpu_pct, 2),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1].startswith("worker-"):
        mode, url, broker, poll = sys.argv[1].removeprefix("worker-"), sys.argv[2], sys.argv[3], float(sys.argv[4])
        worker_db(url, poll) if mode == "db" else worker_celery(url, broker, poll)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=50.0, help="jobs created per second")
    parser.add_argument("--poll", type=float, nargs="+", default=[0.5], help="poll intervals to try")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measurement")
    parser.add_argument("--modes", nargs="+", default=["db", "celery"])
    args = parser.parse_args()
    for poll in args.poll:
        for mode in args.modes:
            print(json.dumps(measure(mode, jobs=args.jobs, rate=args.rate, poll=poll, idle_s=args.idle)), flush=True)


if __name__ == "__main__":
    main()
