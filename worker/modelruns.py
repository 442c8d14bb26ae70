"""A model run's end: once every region job has ended, the whole patched model is verified.

`finish_model_run_if_done` is called after each job a worker finishes (and by ``kernelloop model
optimize`` after its jobs): if the job optimised a region of a model run and it was the run's last
job to end, this caller claims the run (``applying``: one caller wins) and `apply_model_run`
patches the model with each region's best verified kernel, lets the referee verify and time the
whole model (`harness.modelapply.apply_kernels`: a kernel that breaks the model is left out with
the reason) and stores the report. Runs no model or kernel code itself: the referee's sandboxes do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from harness import HarnessOptions
from harness.modelapply import apply_kernels
from problems import ProblemFormatError, parse_problem
from store import (
    ModelRunState,
    claim_model_apply,
    finish_model_run,
    get_attempt,
    get_model_run,
    model_run_of_job,
    region_jobs,
    session_scope,
)
from vocabulary.modelreport import ApplyReport, KernelChoice
from vocabulary.regionplan import ModelProfile

__all__ = ["apply_model_run", "best_kernels", "finish_model_run_if_done"]

log = logging.getLogger(__name__)


def best_kernels(factory: sessionmaker[Session], run_id: int) -> dict[str, KernelChoice]:
    """Each region's best verified kernel (its source and verdict), for the regions that have one."""
    kernels: dict[str, KernelChoice] = {}
    with session_scope(factory) as session:
        for item in region_jobs(session=session, run_id=run_id):
            job = item.job
            if job is None or job.best_attempt_id is None:
                continue
            best = job.best_attempt
            if best is None:
                continue
            attempt = get_attempt(session=session, job_id=job.id, n=best.n)
            kernels[item.region.name] = KernelChoice(attempt.source, attempt.read_verdict())
    return kernels


def apply_model_run(factory: sessionmaker[Session], run_id: int, options: HarnessOptions, *,
                    on_progress: Callable[[str], None] | None = None) -> ApplyReport | None:
    """Verify and time the run's model patched with its regions' best kernels; store the report
    and end the run (``succeeded`` when the patched model passed). The run must be ``applying``."""
    with session_scope(factory) as session:
        run = get_model_run(session=session, run_id=run_id)
        name, source, target, profile_data = run.name, run.model_source, run.target, dict(run.profile)
    kernels = best_kernels(factory, run_id)
    if not kernels:
        with session_scope(factory) as session:
            finish_model_run(session=session, run_id=run_id, state=ModelRunState.FAILED,
                             error="no region job produced a verified kernel: the model is unchanged")
        return None
    try:
        model = parse_problem(source, problem_id=name)
        profile = ModelProfile.from_dict(profile_data)
        report = apply_kernels(model, profile, kernels, target=target.value, options=options, model_name=name,
                               on_progress=on_progress)
    except (ProblemFormatError, ValueError, KeyError) as exc:
        with session_scope(factory) as session:
            finish_model_run(session=session, run_id=run_id, state=ModelRunState.FAILED,
                             error=f"the whole model could not be patched: {exc}")
        return None
    with session_scope(factory) as session:
        finish_model_run(session=session, run_id=run_id,
                         state=ModelRunState.SUCCEEDED if report.passed else ModelRunState.FAILED,
                         report=report.to_dict(), error=None if report.passed else _failure(report))
    return report


def _failure(report: ApplyReport) -> str:
    if report.verdict is None:
        return "; ".join(report.notes) or "no kernel could be kept"
    return f"the patched model did not pass: {report.verdict.message}"


def finish_model_run_if_done(factory: sessionmaker[Session], job_id: int, options: HarnessOptions) -> None:
    """After ``job_id`` ended: verify its model run's whole model if it was the run's last job."""
    try:
        with session_scope(factory) as session:
            run_id = model_run_of_job(session=session, job_id=job_id)
            if run_id is None or not claim_model_apply(session=session, run_id=run_id):
                return
    except Exception:  # the job itself is finished; `kernelloop model apply --from` can still apply the run
        log.exception("job %s: checking its model run failed", job_id)
        return
    log.info("model run %s: every region job ended; verifying the whole patched model", run_id)
    try:
        apply_model_run(factory, run_id, options)
    except Exception as exc:  # our failure: the run ends failed rather than stuck in `applying`
        log.exception("model run %s: the whole-model verification failed", run_id)
        with session_scope(factory) as session:
            finish_model_run(session=session, run_id=run_id, state=ModelRunState.FAILED,
                             error=f"the whole-model verification failed in the worker: {type(exc).__name__}: {exc}")
