"""Model runs: a model's selected regions as agent jobs, grouped, then its whole-model report.

`create_model_run` stores the model, its profile and one agent job per region (each region's
problem source stored like any posted problem; budgets as the caller split them). The run is
``running`` while its jobs are; `claim_model_apply` moves it to ``applying`` once every job has
ended (one caller wins: a guarded ``UPDATE``), and `finish_model_run` stores the report. None of
these functions commits (see `store.db`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from store._sql import write_row
from store.errors import NotFound
from store.jobs import CancelOutcome, NewJob, cancel_job, create_jobs
from store.models import Job, ModelRegion, ModelRun, utcnow
from store.pagination import DEFAULT_PAGE_SIZE, RowPage, offset_page
from store.problems import get_or_create_problem
from store.states import JobKind, ModelRunState, Target
from vocabulary.wire import JsonObject, JsonValue

__all__ = [
    "SPLIT_BUDGETS",
    "NewModelRegion",
    "RegionJob",
    "cancel_model_run",
    "claim_model_apply",
    "create_model_run",
    "finish_model_run",
    "get_model_run",
    "list_model_runs",
    "model_run_of_job",
    "region_jobs",
    "split_budgets",
]


#: The budgets a model run splits among its regions by share (``turns`` bounds each trajectory's
#: conversation and is not split), with each region's floor: enough to compile, check, time and submit.
SPLIT_BUDGETS: dict[str, float] = {"tool_calls": 6, "max_tokens": 20_000, "max_cost_usd": 0.0, "wall_clock_s": 120.0}


def split_budgets(total: Mapping[str, JsonValue], weights: Mapping[str, float]) -> dict[str, JsonObject]:
    """Each region's budgets: the run's ``total`` (budget name → value) split by the regions'
    weights (`vocabulary.regionplan.share_weights`), at least each budget's floor; budgets that are
    not split (``turns``, ``target_speedup``) and missing ones are passed as they are."""
    split: dict[str, JsonObject] = {}
    for region, weight in weights.items():
        budgets: JsonObject = {}
        for name, value in total.items():
            if name in SPLIT_BUDGETS and isinstance(value, int | float) and not isinstance(value, bool):
                part = max(SPLIT_BUDGETS[name], value * weight)
                budgets[name] = round(part) if isinstance(value, int) else part
            else:
                budgets[name] = value
        split[region] = budgets
    return split


@dataclass(frozen=True)
class NewModelRegion:
    """One region to optimise: its name and share, its problem (source and parsed declarations)
    and its job's budgets."""

    name: str
    share: float
    source: str
    declarations: JsonObject
    budgets: JsonObject


@dataclass(frozen=True)
class RegionJob:
    """A run's region with its job (``None`` once the job was deleted)."""

    region: ModelRegion
    job: Job | None


def create_model_run(*, session: Session, name: str, model_source: str, model_sha256: str, target: Target,
                     profile: JsonObject, regions: Sequence[NewModelRegion], owner_id: int | None = None,
                     llm_profile: str | None = None, llm_model: str | None = None,
                     budgets: JsonObject | None = None, trajectories: int = 1,
                     now: datetime | None = None) -> ModelRun:
    """Store a model run and queue one agent job per region (largest share first).

    Raises:
        ValueError: no region was given.
    """
    if not regions:
        raise ValueError("a model run needs at least one region")
    now = now or utcnow()
    ordered = sorted(regions, key=lambda r: r.share, reverse=True)
    specs = []
    for region in ordered:
        problem = get_or_create_problem(session=session, source=region.source,
                                        declarations=dict(region.declarations), bundled_id=None)
        specs.append(NewJob(problem_id=problem.id, target=target, owner_id=owner_id, kind=JobKind.AGENT,
                            llm_profile=llm_profile, llm_model=llm_model, budgets=dict(region.budgets),
                            trajectories_count=trajectories))
    jobs = create_jobs(session=session, specs=specs, now=now)
    run = ModelRun(owner_id=owner_id, name=name, model_source=model_source, model_sha256=model_sha256,
                   target=target, llm_profile=llm_profile, llm_model=llm_model, budgets=dict(budgets or {}),
                   profile=dict(profile), state=ModelRunState.RUNNING, created_at=now)
    session.add(run)
    session.flush()
    session.add_all([ModelRegion(model_run_id=run.id, name=region.name, share=region.share, position=k,
                                 job_id=job.id) for k, (region, job) in enumerate(zip(ordered, jobs, strict=True))])
    session.flush()
    return run


def get_model_run(*, session: Session, run_id: int) -> ModelRun:
    """The run, or NotFound."""
    run = session.get(ModelRun, run_id)
    if run is None:
        raise NotFound("model run", run_id)
    return run


def list_model_runs(*, session: Session, owner_id: int | None = None, limit: int = DEFAULT_PAGE_SIZE,
                    offset: int = 0) -> RowPage[ModelRun]:
    """Runs, newest first; ``owner_id=None`` lists every owner's."""
    stmt = select(ModelRun).order_by(ModelRun.id.desc())
    if owner_id is not None:
        stmt = stmt.where(ModelRun.owner_id == owner_id)
    return offset_page(session, stmt, limit=limit, offset=offset)


def region_jobs(*, session: Session, run_id: int) -> list[RegionJob]:
    """The run's regions in order (largest share first), each with its job."""
    rows = session.execute(
        select(ModelRegion, Job).outerjoin(Job, Job.id == ModelRegion.job_id)
        .where(ModelRegion.model_run_id == run_id).order_by(ModelRegion.position)).all()
    return [RegionJob(region, job) for region, job in rows]


def model_run_of_job(*, session: Session, job_id: int) -> int | None:
    """The run a job optimises a region of, if any."""
    return session.scalar(select(ModelRegion.model_run_id).where(ModelRegion.job_id == job_id))


def claim_model_apply(*, session: Session, run_id: int) -> bool:
    """Move a running run to ``applying`` if every job of it has ended; whether this caller did."""
    jobs = region_jobs(session=session, run_id=run_id)
    if any(r.job is not None and not r.job.state.is_terminal for r in jobs):
        return False
    stmt = (update(ModelRun).where(ModelRun.id == run_id, ModelRun.state == ModelRunState.RUNNING)
            .values(state=ModelRunState.APPLYING).returning(ModelRun.id))
    return write_row(session, ModelRun, run_id, stmt) is not None


def finish_model_run(*, session: Session, run_id: int, state: ModelRunState, report: JsonObject | None = None,
                     error: str | None = None, now: datetime | None = None) -> None:
    """End a run (from ``running`` or ``applying``) with its report or the reason it has none.

    Raises:
        ValueError: ``state`` is not a final state.
    """
    if not state.is_terminal:
        raise ValueError(f"{state.value} is not a final state of a model run")
    session.execute(update(ModelRun).where(ModelRun.id == run_id, ModelRun.state.in_(
        [ModelRunState.RUNNING, ModelRunState.APPLYING])).values(
        state=state, report=dict(report) if report is not None else None, error=error, finished_at=now or utcnow()))
    session.flush()


def cancel_model_run(*, session: Session, run_id: int) -> list[CancelOutcome]:
    """Cancel every job of a run that has not ended, and the run if it was still running.

    Raises:
        NotFound: no such run.
    """
    run = get_model_run(session=session, run_id=run_id)
    outcomes = [cancel_job(session=session, job_id=r.job.id, reason="its model run was cancelled")
                for r in region_jobs(session=session, run_id=run_id) if r.job is not None]
    if run.state is ModelRunState.RUNNING:
        finish_model_run(session=session, run_id=run_id, state=ModelRunState.CANCELLED, error="cancelled by its owner")
    return outcomes
