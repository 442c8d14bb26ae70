"""What ``/models`` does: check a model run's request, store it with its region jobs, announce them.

The model's source and each region's problem source are parsed (``ast``), never run: the profile
in the request was made where the model may run (``kernelloop model profile`` on a machine of the
run's target). The run's region jobs count against the key's quotas like any jobs, all at once:
a run with more regions than the key may run at once is refused (429) with the figures and what
to do (`--top`, `regions`). The run's budgets are split among its regions by share.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session, sessionmaker

from api.dispatch import Dispatcher, DispatchError
from api.errors import InvalidInput, QueueUnavailable, QuotaExceeded
from api.model_schemas import ModelRunCreate, ModelRunPublic
from api.services import check_profile_key, check_script, check_text, resolve_profile
from api.submissions import QUOTA_WINDOW, resolve_budgets
from config import Settings
from problems import ProblemFormatError, parse_problem
from store import (
    SPLIT_BUDGETS,
    ApiKey,
    ModelRun,
    NewModelRegion,
    NotFound,
    Target,
    cancel_model_run,
    create_model_run,
    get_model_run,
    key_cost_left,
    lock_key_usage,
    region_jobs,
    session_scope,
    split_budgets,
    utcnow,
)
from vocabulary.regionplan import ModelProfile, select_regions, share_weights
from vocabulary.wire import WireError

__all__ = ["cancel_owned_model_run", "get_owned_model_run", "submit_model_run"]


def _profile(body: ModelRunCreate, target: Target) -> ModelProfile:
    try:
        profile = ModelProfile.from_dict(body.profile)
    except (WireError, ValueError) as exc:
        raise InvalidInput(f"profile is not a model profile (`kernelloop model profile --json`): {exc}",
                           code="invalid_profile") from None
    if profile.target != target.value:
        raise InvalidInput(f"the profile was made on {profile.target}, the run is for {target.value}: profile the "
                           "model on the run's target (its shares depend on the device)", code="invalid_profile")
    return profile


def submit_model_run(*, factory: sessionmaker[Session], dispatcher: Dispatcher, settings: Settings, key: ApiKey,
                     body: ModelRunCreate) -> ModelRunPublic:
    """Check, store and queue a model run (one agent job per selected region)."""
    check_text("model_source", body.model_source, code="invalid_model")
    try:
        model = parse_problem(body.model_source, problem_id=body.name)
    except ProblemFormatError as exc:
        raise InvalidInput(f"model_source is not a model file: {exc}", code="invalid_model") from None
    llm_profile, llm_model = resolve_profile(body.llm_profile, None, settings)
    check_profile_key(llm_profile, settings)
    raw_target = body.profile.get("target")
    profile_target = Target(raw_target) if isinstance(raw_target, str) and raw_target in ("cpu", "cuda") else None
    target = body.target or profile_target or Target(settings.default_target)
    profile = _profile(body, target)
    try:
        chosen = select_regions(profile, names=body.regions, top=body.top, coverage=body.coverage)
    except KeyError as exc:
        raise InvalidInput(str(exc.args[0]), code="unknown_region") from None
    if not chosen:
        raise InvalidInput("the profile has no region to optimise", code="invalid_profile")
    regions = []
    weights = share_weights({r.name: r.share for r in chosen})
    with session_scope(factory) as session:
        cost_left = key_cost_left(session=session, api_key_id=key.id)
    # A run's default for what is split over its regions: a job's default for each of them.
    defaults = settings.default_budgets()
    per_run = replace(defaults, **{name: getattr(defaults, name) * len(chosen) for name in SPLIT_BUDGETS})
    total = resolve_budgets(body.budgets, per_run, cost_left=cost_left).to_dict()
    budgets = split_budgets(total, weights)
    for region in chosen:
        try:
            problem = parse_problem(region.source, problem_id=f"{body.name.removesuffix('.py')}/{region.name}")
        except ProblemFormatError as exc:
            raise InvalidInput(f"region {region.name}'s source is not a problem: {exc}",
                               code="invalid_profile") from None
        check_script(llm_profile, settings, problem.id, target)
        regions.append(NewModelRegion(name=region.name, share=region.share, source=region.source,
                                      declarations={k: v for k, v in problem.to_dict().items() if k != "source"},
                                      budgets=budgets[region.name]))
    with session_scope(factory) as session:
        limits, usage = lock_key_usage(session=session, api_key_id=key.id, since=utcnow() - QUOTA_WINDOW)
        count = len(regions)
        if usage.active_jobs + count > limits.max_concurrent_jobs:
            raise QuotaExceeded(
                f"this model run needs {count} jobs at once and this key has {usage.active_jobs} of its "
                f"{limits.max_concurrent_jobs} running: choose fewer regions (`top`, `regions`) or ask an admin for "
                "a higher limit", extra={"quota": {"name": "max_concurrent_jobs", "limit": limits.max_concurrent_jobs,
                                                    "used": usage.active_jobs}})
        if usage.jobs_since + count > limits.max_jobs_per_day:
            raise QuotaExceeded(
                f"this model run needs {count} jobs and this key created {usage.jobs_since} of its "
                f"{limits.max_jobs_per_day} a day: try later or choose fewer regions",
                extra={"quota": {"name": "max_jobs_per_day", "limit": limits.max_jobs_per_day,
                                 "used": usage.jobs_since}})
        run = create_model_run(session=session, name=body.name, model_source=model.source, model_sha256=model.sha256,
                               target=target, profile=profile.to_dict(), regions=regions, owner_id=key.id,
                               llm_profile=llm_profile, llm_model=llm_model, budgets=total,
                               trajectories=body.trajectories or settings.default_trajectories)
        run_id = run.id
        jobs = [item.job.id for item in region_jobs(session=session, run_id=run_id) if item.job is not None]
    try:
        for job_id in jobs:
            dispatcher.job_created(job_id, target.value)
    except DispatchError as exc:
        with session_scope(factory) as session:
            cancel_model_run(session=session, run_id=run_id)
        raise QueueUnavailable(f"the job queue is unreachable; the model run was cancelled: {exc}") from None
    with session_scope(factory) as session:
        return ModelRunPublic.from_run(get_model_run(session=session, run_id=run_id),
                                       region_jobs(session=session, run_id=run_id))


def _owned(session: Session, key: ApiKey, run_id: int) -> ModelRun:
    run = get_model_run(session=session, run_id=run_id)
    if not key.is_admin and run.owner_id != key.id:
        raise NotFound("model run", run_id)
    return run


def get_owned_model_run(*, session: Session, key: ApiKey, run_id: int) -> ModelRunPublic:
    """The run if this key may see it (another key's is "not found")."""
    run = _owned(session, key, run_id)
    return ModelRunPublic.from_run(run, region_jobs(session=session, run_id=run_id))


def cancel_owned_model_run(*, factory: sessionmaker[Session], key: ApiKey, run_id: int) -> ModelRunPublic:
    """Cancel a run of this key: its jobs that have not ended, and the run."""
    with session_scope(factory) as session:
        _owned(session, key, run_id)
        cancel_model_run(session=session, run_id=run_id)
    with session_scope(factory) as session:
        return get_owned_model_run(session=session, key=key, run_id=run_id)
