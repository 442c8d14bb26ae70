"""What the routes do, as functions: input checks that need more than types, quotas, the unit of
work around each write, and the hand-off to the queue.

Routes stay one call long. Writes run in their own `store.session_scope`, committed before the
function returns, so a client that reads right after a ``202``/``200`` sees what it did, and a
worker woken by the dispatcher finds the job row. Nothing here runs problem or candidate code:
sources are parsed (``ast``), never imported.
"""

from __future__ import annotations

import ast
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from api.dispatch import Dispatcher, DispatchError
from api.errors import InvalidInput, QueueUnavailable, QuotaExceeded
from api.metrics import RequestMetrics
from api.schemas import Budgets, EvaluationCreate, JobCreate, JobPublic
from config import Settings
from problems import MAX_SOURCE_BYTES, Problem, bundled_ids, bundled_problems, parse_problem
from store import (
    ApiKey,
    CancelOutcome,
    IllegalTransition,
    Job,
    JobKind,
    JobState,
    NotFound,
    StoredProblem,
    cancel_job,
    create_job,
    delete_job,
    get_job,
    get_or_create_problem,
    key_cost_usd,
    key_usage,
    session_scope,
    utcnow,
)

__all__ = [
    "QUOTA_WINDOW",
    "cancel_owned_job",
    "check_candidate",
    "check_owned_job",
    "check_text",
    "delete_owned_job",
    "find_bundled_problem",
    "get_owned_job",
    "resolve_problem",
    "submit_evaluation",
    "submit_job",
    "unknown_problem_message",
]

#: The window of the "jobs per day" quota: a rolling day, not a calendar day.
QUOTA_WINDOW = timedelta(days=1)
#: The name a posted problem source gets (bundled problems keep their ids).
POSTED_PROBLEM_ID = "posted"
CANDIDATE_CLASS = "ModelNew"


# -- problems and candidates -----------------------------------------------------------------------


def find_bundled_problem(problem_id: str) -> Problem | None:
    """A bundled problem by id only. Never a path: `problems.load_problem` also reads files, and an
    id from a request must not name a file on the server."""
    return next((p for p in bundled_problems() if p.id == problem_id), None)


def unknown_problem_message(problem_id: str) -> str:
    """Why an id names nothing, with the ids it might have meant."""
    ids = bundled_ids()
    stem = problem_id.rsplit("/", 1)[-1]
    close = [i for i in ids if stem and stem in i][:5]
    if close:
        hint = f"; did you mean {', '.join(close)}?"
    else:
        hint = f"; the {len(ids)} bundled ids are listed by GET /problems"
    return f"no bundled problem {problem_id!r}{hint} (or send the file's text as problem_source)"


def resolve_problem(*, problem_id: str | None, problem_source: str | None) -> Problem:
    """The parsed problem of a request (a bundled id or a posted source).

    Raises:
        InvalidInput: unknown bundled id.
        ProblemFormatError: the posted source is not a valid problem file (the message says why).
    """
    if problem_id is not None:
        problem = find_bundled_problem(problem_id)
        if problem is None:
            raise InvalidInput(unknown_problem_message(problem_id), code="unknown_problem")
        return problem
    assert problem_source is not None  # the schema requires exactly one
    check_text("problem_source", problem_source, code="invalid_problem")
    return parse_problem(problem_source, problem_id=POSTED_PROBLEM_ID)


def check_text(field: str, value: str, *, code: str) -> None:
    """Refuse text a database column cannot hold (NUL; lone surrogates are not UTF-8).

    Raises:
        InvalidInput: with ``code``, the field's name and what is wrong.
    """
    if "\x00" in value:
        raise InvalidInput(f"{field} contains a NUL character; send the file as plain UTF-8 text", code=code)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{field} is not valid UTF-8 text (an unpaired surrogate at character {exc.start})", code=code
        ) from None


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def check_candidate(source: str) -> None:
    """Static checks of a candidate: size, syntax, a module-level ``ModelNew``.

    Raises:
        InvalidInput: with ``code="invalid_candidate"`` and what to fix.
    """
    check_text("candidate_source", source, code="invalid_candidate")
    size = len(source.encode())
    if size > MAX_SOURCE_BYTES:
        raise InvalidInput(
            f"candidate_source is {size} bytes; the limit is {MAX_SOURCE_BYTES}", code="invalid_candidate"
        )
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise InvalidInput(
            f"candidate_source: syntax error at line {exc.lineno}: {exc.msg}", code="invalid_candidate"
        ) from None
    if not _defines(tree, CANDIDATE_CLASS):
        raise InvalidInput(
            f"candidate_source must define class {CANDIDATE_CLASS}(nn.Module) at module level, with the "
            "reference Model's constructor and forward signatures",
            code="invalid_candidate",
        )


# -- budgets, profiles, quotas ---------------------------------------------------------------------


def _resolve_profile(name: str | None, settings: Settings) -> tuple[str, str]:
    profile_name = name or settings.default_llm_profile
    profile = settings.llm_profiles.get(profile_name)
    if profile is None:
        known = ", ".join(sorted(settings.llm_profiles)) or "none configured"
        raise InvalidInput(
            f"llm_profile {profile_name!r} is not configured on this server; choose one of: {known}",
            code="unknown_llm_profile",
        )
    return profile_name, profile.model


def _resolve_budgets(budgets: Budgets, settings: Settings, *, cost_left: float | None) -> dict[str, Any]:
    max_cost = settings.default_max_cost_usd if budgets.max_cost_usd is None else budgets.max_cost_usd
    if cost_left is not None:
        # The key's cost cap bounds every job: a job may spend at most what the key has left.
        max_cost = min(max_cost, cost_left)
    return {
        "turns": budgets.turns or settings.default_turns,
        "tool_calls": budgets.tool_calls or settings.default_tool_calls,
        "max_tokens": budgets.max_tokens or settings.default_max_tokens,
        "max_cost_usd": max_cost,
        "wall_clock_s": budgets.wall_clock_s or settings.default_wall_clock_s,
        "target_speedup": budgets.target_speedup,
    }


def _cost_left(session: Session, key: ApiKey, *, charge_cost: bool) -> float | None:
    """What the key's cost cap leaves (``None`` without a cap); a job that would call an LLM is
    refused once the cap is spent (evaluations use no LLM and still run).

    Raises:
        QuotaExceeded: ``charge_cost`` and nothing is left.
    """
    if key.cost_cap_usd is None:
        return None
    spent = key_cost_usd(session=session, api_key_id=key.id)
    left = key.cost_cap_usd - spent
    if charge_cost and left <= 0:
        raise QuotaExceeded(
            f"this key's jobs have cost ${spent:.2f} of its ${key.cost_cap_usd:.2f} cap; "
            "ask an admin to raise the cap (evaluations, which use no LLM, still run)"
        )
    return max(left, 0.0)


def _check_job_quotas(session: Session, key: ApiKey, *, created: int) -> None:
    """Raise `QuotaExceeded` if the ``created`` jobs this transaction just added put the key over
    its quotas (the transaction then rolls back, and they never existed).

    Called after the insert: `store.key_usage` locks the key until commit, and the lock then
    covers only this count and the commit, not the whole submission. Under a burst from one
    key, the submissions take turns there; the shorter the turn, the more of them a second.
    """
    usage = key_usage(session=session, api_key_id=key.id, since=utcnow() - QUOTA_WINDOW)
    active, recent = usage.active_jobs - created, usage.jobs_since - created
    if active >= key.max_concurrent_jobs:
        raise QuotaExceeded(
            f"this key has {active} jobs queued or running, its limit is {key.max_concurrent_jobs}; "
            "wait for one to finish or cancel one (POST /jobs/{id}/cancel)"
        )
    if recent >= key.max_jobs_per_day:
        raise QuotaExceeded(
            f"this key created {recent} jobs in the last 24 hours, its limit is {key.max_jobs_per_day}; "
            "try again later or ask an admin for a higher limit"
        )


# -- submissions -----------------------------------------------------------------------------------


def _queue(
    *,
    factory: sessionmaker[Session],
    dispatcher: Dispatcher,
    metrics: RequestMetrics,
    job_id: int,
    target: str,
) -> None:
    """Announce a committed job; if the broker refuses, cancel it (so it holds no quota) and 503."""
    try:
        dispatcher.job_created(job_id, target)
    except DispatchError as exc:
        metrics.dispatch_failed()
        with session_scope(factory) as session:
            cancel_job(session=session, job_id=job_id, reason=f"not queued: {exc}")
        raise QueueUnavailable(
            f"the job queue is unreachable, so job {job_id} was cancelled; try again shortly"
        ) from exc


def submit_job(
    *,
    factory: sessionmaker[Session],
    dispatcher: Dispatcher,
    settings: Settings,
    metrics: RequestMetrics,
    key: ApiKey,
    body: JobCreate,
) -> JobPublic:
    """Check, store and queue an agent job."""
    problem = resolve_problem(problem_id=body.problem_id, problem_source=body.problem_source)
    profile, model = _resolve_profile(body.llm_profile, settings)
    with session_scope(factory) as session:
        cost_left = _cost_left(session, key, charge_cost=True)
        stored = _store_problem(session, problem, bundled=body.problem_id is not None)
        job = create_job(
            session=session,
            problem_id=stored.id,
            target=body.target,
            owner_id=key.id,
            kind=JobKind.AGENT,
            llm_profile=profile,
            llm_model=model,
            budgets=_resolve_budgets(body.budgets, settings, cost_left=cost_left),
            trajectories_count=body.trajectories or settings.default_trajectories,
        )
        _check_job_quotas(session, key, created=1)
        public = JobPublic.from_job(job)
    _queue(factory=factory, dispatcher=dispatcher, metrics=metrics, job_id=public.id, target=public.target.value)
    return public


def submit_evaluation(
    *,
    factory: sessionmaker[Session],
    dispatcher: Dispatcher,
    metrics: RequestMetrics,
    key: ApiKey,
    body: EvaluationCreate,
) -> JobPublic:
    """Check, store and queue an evaluation job (one candidate, no LLM)."""
    problem = resolve_problem(problem_id=body.problem_id, problem_source=body.problem_source)
    check_candidate(body.candidate_source)
    with session_scope(factory) as session:
        stored = _store_problem(session, problem, bundled=body.problem_id is not None)
        job = create_job(
            session=session,
            problem_id=stored.id,
            target=body.target,
            owner_id=key.id,
            kind=JobKind.EVALUATION,
            candidate_source=body.candidate_source,
        )
        _check_job_quotas(session, key, created=1)
        public = JobPublic.from_job(job)
    _queue(factory=factory, dispatcher=dispatcher, metrics=metrics, job_id=public.id, target=public.target.value)
    return public


def _store_problem(session: Session, problem: Problem, *, bundled: bool) -> StoredProblem:
    """The problem's row. Keep it while the job is in use: the session holds rows weakly, and
    `JobPublic.from_job` reads ``job.problem`` (from the session, not the database, while it lives)."""
    declarations = {k: v for k, v in problem.to_dict().items() if k != "source"}
    return get_or_create_problem(
        session=session,
        source=problem.source,
        declarations=declarations,
        bundled_id=problem.id if bundled else None,
    )


# -- owned jobs ------------------------------------------------------------------------------------


def get_owned_job(*, session: Session, key: ApiKey, job_id: int) -> Job:
    """The job if this key may see it. Another key's job is "not found", never "forbidden":
    a 403 would tell a stranger which job ids exist.

    Raises:
        NotFound: no such job, or not this key's (and the key is not an admin).
    """
    job = get_job(session=session, job_id=job_id)
    if not key.is_admin and job.owner_id != key.id:
        raise NotFound("job", job_id)
    return job


def check_owned_job(*, factory: sessionmaker[Session], key: ApiKey, job_id: int) -> None:
    """`get_owned_job` in a short session of its own (for a response that outlives its request's).

    Raises:
        NotFound: see `get_owned_job`.
    """
    with session_scope(factory) as session:
        get_owned_job(session=session, key=key, job_id=job_id)


def cancel_owned_job(*, factory: sessionmaker[Session], key: ApiKey, job_id: int) -> tuple[CancelOutcome, JobPublic]:
    """Cancel a job of this key: a queued one at once, a running one at its worker's next heartbeat.

    Raises:
        NotFound: see `get_owned_job`.
        IllegalTransition: the job already succeeded or failed.
    """
    with session_scope(factory) as session:
        get_owned_job(session=session, key=key, job_id=job_id)
        outcome = cancel_job(session=session, job_id=job_id, reason=f"cancelled by key {key.key_prefix}…")
        job = get_job(session=session, job_id=job_id)
        session.refresh(job)
        if outcome is CancelOutcome.ALREADY_FINISHED and job.state is not JobState.CANCELLED:
            raise IllegalTransition(job.state.value, "cancelled", "the job already finished; nothing to cancel")
        return outcome, JobPublic.from_job(job)


def delete_owned_job(*, factory: sessionmaker[Session], key: ApiKey, job_id: int) -> None:
    """Delete a finished job of this key with its attempts, messages, events and posted source.

    Raises:
        NotFound: see `get_owned_job`.
        IllegalTransition: the job is queued or running (cancel it first).
    """
    with session_scope(factory) as session:
        get_owned_job(session=session, key=key, job_id=job_id)
        delete_job(session=session, job_id=job_id)
