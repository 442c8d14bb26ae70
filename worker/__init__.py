"""The worker: runs jobs with the harness (and the agent) and stores what happens (docs/architecture.md).

::

    runner.run_claimed_job  the functional core: one claimed job, start to finish (both modes)
    ├── lease.LeaseKeeper       heartbeat thread: renews the lease, notices cancel and loss
    ├── evaluator.RefereeEvaluator  agent.Evaluator over harness.Referee: infra retries, timing lock
    ├── recorder.StoreRecorder      agent.Recorder over the store: one short transaction per call
    └── devicelock                  one timing run per device (flock under the harness cache)
    reaper                expired leases back to the queue (or failed), re-dispatched
    embedded.EmbeddedWorker   the embedded mode: the database is the queue (`kernelloop up`)
    celery_app.make_celery    the distributed mode's Celery app (Redis), built and nothing else
    tasks                 the task ``kernelloop.run_job(job_id)``: claim that job, run it
    wiring.create_worker_app  app + tasks + reaper for one Celery worker process
    main                  ``celery -A worker.main worker`` (`kernelloop worker` does the same)

Nothing here imports torch: the harness does everything that touches a device in a sandbox (a
confined subprocess), so a worker process never initialises CUDA. Importing this package does not
import Celery either (only `celery_app`, `tasks`, `wiring` and `main` do), nor `embedded` (run as
``python -m worker.embedded``).

Owns: running a claimed job (`runner.run_claimed_job`), leases' heartbeats, the device lock, the
worker's events (`recorder.StoreRecorder`, typed by `vocabulary.EventType`).
May import: `agent` (its types and `run_job`, directly), `harness`, `store`, `problems`, `config`,
Celery (only in the modules above); never `api`.
In and out: a job id comes in (a Celery task or the embedded loop's claim); the job's columns are
read as values (its budgets and the problem's declarations through `vocabulary.wire.Reader`);
verdicts, messages, events and the job's final state go out to the store, as values (JSON only
at the columns).
"""

from worker.evaluator import RefereeEvaluator
from worker.lease import LeaseKeeper, StopSignal, new_worker_id
from worker.recorder import StoreRecorder
from worker.runner import RunOutcome, harness_options_for, run_claimed_job

__all__ = [
    "LeaseKeeper",
    "RefereeEvaluator",
    "RunOutcome",
    "StopSignal",
    "StoreRecorder",
    "harness_options_for",
    "new_worker_id",
    "run_claimed_job",
]
