"""The functional core of a worker: run one claimed job with the harness (and the agent), store it.

`run_job` is what both queues call once a job is claimed: the Celery task (`worker.tasks`, after
`store.claim_job`) and the embedded loop (`worker.embedded`, after `store.claim_next_job`). It
loads the job, builds the `problems.Problem` and the `harness.HarnessOptions`, keeps the lease
alive (`worker.lease.LeaseKeeper`), runs the job and finishes it:

- an **evaluation** job (``POST /evaluations``): one `benchmark` evaluation of the given
  candidate, stored as attempt 1; the job succeeds whatever the verdict says about the
  candidate, and fails only when our infrastructure failed on every retry;
- an **agent** job: `agent.run_job` (or the ``run_agent`` seam) with a
  `worker.evaluator.RefereeEvaluator` and a `worker.recorder.StoreRecorder`; then the
  candidates the agent reports quarantined (``suspicious``) are re-timed in a fresh process with
  fresh seeds (`retime_options`), so a real large speedup can become the job's best, and the
  fastest verified kernel is re-judged the same way whatever its speedup (fastest first, until
  one passes again): only a re-judged kernel is the job's best. The job succeeds only with one;
  otherwise it fails with the agent's account of why (no attempt, refused, context, budget, the
  LLM endpoint's message) or with the re-judging's.

Cancel and lease loss are noticed by the heartbeat thread and acted on at safe points: between
evaluations (the recorder's ``cancelled()``), and before the job is finished. A lost job is left
alone (someone else holds it now); a crash of the worker process leaves the lease to expire and
the reaper to re-queue the job. Nothing here imports torch: the harness drives its sandboxes
(confined subprocesses).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

import agent
from agent import CandidateRecord, Evaluator, JobResult, JobSpec, LLMProvider, Recorder
from agent.retry import INFRA_RETRY, NO_RETRY, InfraRetry
from config import LLMProfile, Settings
from harness import HarnessOptions, Referee
from harness.retime import retime_options
from problems import Problem, ProblemFormatError, parse_problem
from store import (
    JobKind,
    JobState,
    LeaseLost,
    LeaseStatus,
    StoredProblem,
    add_job_usage,
    finish_job,
    get_job,
    session_scope,
)
from vocabulary.budgets import Budgets
from vocabulary.evaluation import Depth, Target
from vocabulary.verdict import ErrorKind, Verdict
from vocabulary.wire import JsonObject, JsonValue, Reader
from worker import metrics
from worker.devicelock import current_device_key
from worker.evaluator import RefereeEvaluator, RefereeLike
from worker.lease import LeaseKeeper
from worker.modelruns import finish_model_run_if_done
from worker.recorder import StoreRecorder

__all__ = [
    "EVALUATION_TOOL",
    "MAX_REJUDGED",
    "MAX_RETIMES",
    "RETIME_TOOL",
    "AgentRunner",
    "RefereeFactory",
    "RunOutcome",
    "agent_budgets",
    "harness_options_for",
    "problem_from_row",
    "retime_options",
    "run_claimed_job",
]

log = logging.getLogger(__name__)

#: The ``tool`` of an evaluation job's attempt.
EVALUATION_TOOL = "evaluate"
#: The ``tool`` of the re-timing of a quarantined (``suspicious``) candidate.
RETIME_TOOL = "retime"
#: Quarantined candidates re-timed per job (each costs a fresh reference and a timing run).
MAX_RETIMES = 3
#: Verified kernels re-judged per job, fastest first, until one passes again.
MAX_REJUDGED = 3


class RunOutcome(StrEnum):
    """How a worker's run of a job ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: The job was not (or stopped being) this worker's: nothing more was stored.
    LOST = "lost"


class AgentRunner(Protocol):
    """How an agent job runs: `agent.run_job`'s shape (tests and the load run pass their own)."""

    def __call__(self, spec: JobSpec, *, evaluator: Evaluator, recorder: Recorder,
                 provider: LLMProvider | None = None) -> JobResult: ...


class _JobRefused(Exception):
    """The job cannot run as stored; it fails with this message."""


RefereeFactory = Callable[[Problem, Target, HarnessOptions], RefereeLike]


@dataclass(frozen=True)
class _JobData:
    """What the runner reads of the job row, copied out of its session."""

    id: int
    kind: JobKind
    target: Target
    candidate_source: str | None
    llm_profile: str | None
    llm_model: str | None
    #: The ``jobs.budgets`` column as stored (`agent_budgets` reads it).
    budgets: JsonObject
    trajectories_count: int
    problem: StoredProblem
    #: Seconds from the job's creation to this claim (the latest claim, after a re-queue).
    queue_wait_s: float | None = None


def harness_options_for(settings: Settings) -> HarnessOptions:
    """The harness options of a job run by this service (builds and baselines in its cache).

    The data directory (the embedded SQLite database, the session secret) and the device locks
    are hidden from every sandbox; the harness keeps its own cache visible inside them.
    """
    options = settings.harness_options()
    return options.replace(hidden_paths=(settings.data_dir, options.cache_dir / "locks"))


def problem_from_row(stored: StoredProblem) -> Problem:
    """The parsed problem of a stored source (the API checked it; parsing runs nothing).

    Raises:
        ProblemFormatError: the source does not parse (a row written by something else).
    """
    declarations = Reader(stored.declarations or {}, f"problem {stored.id}'s declarations")
    problem_id = stored.bundled_id or declarations.optional_text("id") or f"problem-{stored.id}"
    return parse_problem(stored.source, problem_id=problem_id, level=declarations.optional_integer("level"))


def agent_budgets(requested: Mapping[str, JsonValue], settings: Settings) -> Budgets:
    """The job's budgets as its row stores them (resolved when it was created); a row written before
    every job stored all of its budgets takes the service's defaults for what it lacks.

    Raises:
        WireError: a budget that is not a number.
    """
    return Budgets.from_dict(requested, defaults=settings.default_budgets())


def _llm_profile(job: _JobData, settings: Settings) -> LLMProfile:
    name = job.llm_profile or settings.default_llm_profile
    profile = settings.llm_profiles.get(name)
    if profile is None:
        known = ", ".join(sorted(settings.llm_profiles)) or "none"
        raise _JobRefused(f"unknown LLM profile {name!r} (this service has: {known})")
    missing_key = profile.missing_key_message(name, "in this worker's environment")
    if missing_key is not None:
        raise _JobRefused(missing_key)
    return profile.model_copy(update={"model": job.llm_model}) if job.llm_model else profile


def _load(session_factory: sessionmaker[Session], job_id: int, worker_id: str) -> _JobData | None:
    with session_scope(session_factory) as session:
        job = get_job(session=session, job_id=job_id)
        if job.state is not JobState.RUNNING or job.worker_id != worker_id:
            return None
        return _JobData(
            id=job.id, kind=job.kind, target=Target(job.target.value), candidate_source=job.candidate_source,
            llm_profile=job.llm_profile, llm_model=job.llm_model, budgets=dict(job.budgets or {}),
            trajectories_count=job.trajectories_count, problem=job.problem,
            queue_wait_s=(job.started_at - job.created_at).total_seconds()
            if job.started_at is not None and job.created_at is not None else None,
        )


def run_claimed_job(
    job_id: int,
    *,
    settings: Settings,
    session_factory: sessionmaker[Session],
    worker_id: str,
    harness_options: HarnessOptions | None = None,
    run_agent: AgentRunner | None = None,
    referee_factory: RefereeFactory = Referee,
    retry: InfraRetry = INFRA_RETRY,
) -> RunOutcome:
    """Run a job this worker has claimed, and finish it.

    Args:
        job_id: the job, ``running`` under ``worker_id``.
        settings: the service settings (lease and heartbeat, LLM profiles, budgets, cache).
        session_factory: sessions on the service's database.
        worker_id: the id the job was claimed under.
        harness_options: overrides `harness_options_for` (tests: quick timing).
        run_agent: runs an agent job (None: `agent.run_job`; a test or the load run passes its own).
        referee_factory: builds the job's referee (a test seam).
        retry: the infra-retry policy of an evaluation job (an agent job's tools retry themselves).

    Returns:
        How the run ended; the job row says the same unless the outcome is ``lost``.
    """
    job = _load(session_factory, job_id, worker_id)
    if job is None:
        log.warning("job %s is not running under %s; not running it", job_id, worker_id)
        return RunOutcome.LOST
    options = harness_options or harness_options_for(settings)
    keeper = LeaseKeeper(session_factory=session_factory, job_id=job_id, worker_id=worker_id,
                         lease_seconds=settings.lease_seconds, interval_s=settings.heartbeat_seconds)
    recorder = StoreRecorder(session_factory=session_factory, job_id=job_id, worker_id=worker_id,
                             lease_seconds=settings.lease_seconds, lease=keeper)
    outcome, error, charged_s = RunOutcome.FAILED, "", 0.0
    if job.queue_wait_s is not None:
        metrics.QUEUE_WAIT_SECONDS.labels(job.target.value).observe(max(0.0, job.queue_wait_s))
    keeper.beat()  # learn of a cancel that came before the claim's commit
    with keeper, metrics.job_running(job.target.value):
        try:
            outcome, error, charged_s = _run(job, options, keeper, recorder, settings, run_agent or agent.run_job,
                                             referee_factory, retry)
        except LeaseLost:
            keeper.note(LeaseStatus.LOST)
        except _JobRefused as exc:
            outcome, error = RunOutcome.FAILED, str(exc)
        except Exception as exc:
            log.exception("job %s failed in the worker", job_id)
            outcome, error = RunOutcome.FAILED, f"the worker failed: {type(exc).__name__}: {exc}"
    final = _finish(session_factory, job, worker_id, keeper, outcome, error, charged_s)
    metrics.JOBS.labels(job.target.value, job.kind.value, final.value).inc()
    if final is not RunOutcome.LOST:
        finish_model_run_if_done(session_factory, job_id, options)  # a model run's last region job
    return final


def _run(
    job: _JobData,
    options: HarnessOptions,
    keeper: LeaseKeeper,
    recorder: StoreRecorder,
    settings: Settings,
    run_agent: AgentRunner,
    referee_factory: RefereeFactory,
    retry: InfraRetry,
) -> tuple[RunOutcome, str, float]:
    if keeper.should_stop():
        return RunOutcome.CANCELLED, "cancelled before it started", 0.0
    try:
        problem = problem_from_row(job.problem)
    except ProblemFormatError as exc:
        raise _JobRefused(f"the problem does not parse: {exc}") from None
    recorder.progress("started", kind=job.kind.value, target=job.target.value, worker_id=recorder.worker_id)
    referee = referee_factory(problem, job.target, options)
    referee.on_stage = recorder.stage  # the job's live view: header build, baselines, compile, …
    evaluator = RefereeEvaluator(
        referee,
        cache_dir=options.cache_dir,
        device_key=current_device_key(job.target.value),
        # The agent retries infra failures itself (recording each try); an evaluation job here.
        retry=retry if job.kind is JobKind.EVALUATION else NO_RETRY,
        on_infra_failure=lambda verdict, tries: recorder.progress(
            "infra_retry", tries=tries, stage=verdict.stage.value, message=verdict.message[:500]),
        # The problem's own code failed: every trajectory stops at its next safe point.
        on_problem_failure=lambda verdict: keeper.stop_for_problem(),
    )
    # A cancel (or a lost lease) kills the job's sandboxes at once, wherever the job is.
    keeper.on_stop(lambda reason: evaluator.cancel())
    try:
        if job.kind is JobKind.EVALUATION:
            outcome, error = _run_evaluation(job, evaluator, keeper, recorder)
        else:
            outcome, error = _run_agent(job, problem, options, evaluator, recorder, settings, run_agent,
                                        referee_factory)
        if evaluator.problem_failure is not None:
            outcome, error = RunOutcome.FAILED, _problem_reason(evaluator.problem_failure)
        return outcome, error, evaluator.charged_seconds
    finally:
        evaluator.close()


def _run_evaluation(
    job: _JobData, evaluator: RefereeEvaluator, keeper: LeaseKeeper, recorder: StoreRecorder
) -> tuple[RunOutcome, str]:
    if not job.candidate_source:
        raise _JobRefused("an evaluation job without a candidate")
    recorder.progress("evaluating", depth=Depth.BENCHMARK.value)
    verdict = evaluator.evaluate(job.candidate_source, Depth.BENCHMARK)
    if keeper.lost:
        raise LeaseLost(job.id, recorder.worker_id)
    if keeper.cancel_requested:
        return RunOutcome.CANCELLED, "cancelled by its owner"
    recorder.attempt(trajectory_index=None, tool=EVALUATION_TOOL, source=job.candidate_source,
                     parent_sha256=None, verdict=verdict)
    if verdict.error_kind is ErrorKind.INFRA:
        return RunOutcome.FAILED, _infra_reason(verdict, evaluator.infra_failures)
    return RunOutcome.SUCCEEDED, ""


def _problem_reason(verdict: Verdict) -> str:
    return f"the problem's own code failed (not retried): {verdict.message}"


def _infra_reason(verdict: Verdict, tries: int) -> str:
    return f"infrastructure error after {tries} tries, at stage {verdict.stage.value}: {verdict.message}"


def _run_agent(
    job: _JobData,
    problem: Problem,
    options: HarnessOptions,
    evaluator: RefereeEvaluator,
    recorder: StoreRecorder,
    settings: Settings,
    run_agent: AgentRunner,
    referee_factory: RefereeFactory,
) -> tuple[RunOutcome, str]:
    spec = JobSpec(
        problem=problem,
        target=job.target.value,
        llm=_llm_profile(job, settings),
        budgets=agent_budgets(job.budgets, settings),
        trajectories=job.trajectories_count,
        random_trials=options.trials,
    )
    result = run_agent(spec, evaluator=evaluator, recorder=recorder, provider=None)
    quarantined = result.quarantined[:MAX_RETIMES]
    if quarantined and not recorder.cancelled():
        _retime(quarantined, problem, job, options, recorder, referee_factory)
    rejudging = "" if recorder.cancelled() else _rejudge_best(problem, job, options, recorder, referee_factory)
    # Succeeded means a verified kernel that passed again in a fresh process: the store's best.
    if _has_best(recorder):
        return RunOutcome.SUCCEEDED, ""
    if recorder.cancelled():
        return RunOutcome.CANCELLED, "cancelled by its owner"
    return RunOutcome.FAILED, rejudging or result.error or (
        f"no verified kernel (the agent stopped: {result.reason.value})")


def _has_best(recorder: StoreRecorder) -> bool:
    with session_scope(recorder.session_factory) as session:
        return get_job(session=session, job_id=recorder.job_id).best_attempt_id is not None


def _retimed(source: str, problem: Problem, job: _JobData, options: HarnessOptions, recorder: StoreRecorder,
             referee_factory: RefereeFactory) -> Verdict:
    """``source`` benchmarked by a fresh Referee (fresh reference and candidate processes, fresh
    secret seeds, a longer run), closed after."""
    referee = referee_factory(problem, job.target, retime_options(options))
    referee.on_stage = recorder.stage
    evaluator = RefereeEvaluator(referee, cache_dir=options.cache_dir, device_key=current_device_key(job.target.value))
    try:
        return evaluator.evaluate(source, Depth.BENCHMARK)
    finally:
        evaluator.close()


def _rejudge_best(problem: Problem, job: _JobData, options: HarnessOptions, recorder: StoreRecorder,
                  referee_factory: RefereeFactory) -> str:
    """Re-judge the job's fastest verified kernels in a fresh process with fresh seeds, fastest
    first, until one passes again: that re-judging's attempt becomes the job's best (its figures
    are the ones reported). Returns why no kernel is the job's best, or ``""``."""
    tried: list[str] = []
    for _ in range(MAX_REJUDGED):
        if recorder.cancelled():
            return ""
        candidate = recorder.fastest_verified(exclude=tried)
        if candidate is None:
            break
        if candidate.tool == RETIME_TOOL:  # a quarantined kernel that passed its re-time: re-judged already
            recorder.set_best(candidate.attempt_id)
            return ""
        recorder.progress("rejudge", n=candidate.n)
        verdict = _retimed(candidate.source, problem, job, options, recorder, referee_factory)
        attempt_id = recorder.rejudged(of=candidate, tool=RETIME_TOOL, verdict=verdict)
        if verdict.is_verified:
            recorder.set_best(attempt_id)
            return ""
        tried.append(candidate.sha256)
    recorder.set_best(None)
    if not tried:
        return ""
    return (f"no verified kernel passed again when re-judged in a fresh process with fresh seeds "
            f"({len(tried)} tried; see the re-time attempts)")


def _retime(
    quarantined: tuple[CandidateRecord, ...],
    problem: Problem,
    job: _JobData,
    options: HarnessOptions,
    recorder: StoreRecorder,
    referee_factory: RefereeFactory,
) -> None:
    """Re-time quarantined candidates; each becomes a ``retime`` attempt (a pass may become the best)."""
    for candidate in quarantined:
        if recorder.cancelled():
            return
        recorder.progress("retime", source_sha256=candidate.source_sha256)
        verdict = _retimed(candidate.source, problem, job, options, recorder, referee_factory)
        recorder.attempt(trajectory_index=candidate.trajectory_index, tool=RETIME_TOOL, source=candidate.source,
                         parent_sha256=candidate.source_sha256, verdict=verdict)


_TERMINAL = {
    RunOutcome.SUCCEEDED: JobState.SUCCEEDED,
    RunOutcome.FAILED: JobState.FAILED,
    RunOutcome.CANCELLED: JobState.CANCELLED,
}


def _finish(
    session_factory: sessionmaker[Session],
    job: _JobData,
    worker_id: str,
    keeper: LeaseKeeper,
    outcome: RunOutcome,
    error: str,
    charged_s: float,
) -> RunOutcome:
    if keeper.lost:
        log.warning("job %s: the lease was lost; leaving the job to its new holder", job.id)
        return RunOutcome.LOST
    if keeper.cancel_requested and outcome is not RunOutcome.FAILED:
        outcome, error = RunOutcome.CANCELLED, "cancelled by its owner"
    try:
        with session_scope(session_factory) as session:
            if job.target is Target.CUDA and charged_s > 0:
                add_job_usage(session=session, job_id=job.id, gpu_seconds=charged_s)
            finish_job(session=session, job_id=job.id, worker_id=worker_id, state=_TERMINAL[outcome],
                       error=error or None)
    except LeaseLost:
        log.warning("job %s: the lease was lost before it could be finished", job.id)
        return RunOutcome.LOST
    return outcome

