"""What the routes do, as functions: input checks that need more than types, the unit of work
around each write, and (through `api.submissions`) quotas and the hand-off to the queue.

Routes stay one call long. Writes are committed before the function returns (new jobs by the
app's `api.submissions.SubmissionWriter`, several submissions per transaction; the rest in their
own `store.session_scope`), so a client that reads right after a ``202``/``200`` sees what it
did, and a worker woken by the dispatcher finds the job row. Nothing here runs problem or candidate code:
sources are parsed (``ast``), never imported.
"""

from __future__ import annotations

import ast
import functools
import hashlib

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from agent.providers.scripted import has_script, no_script_message
from api.errors import InvalidInput
from api.schemas import EvaluationCreate, JobCreate, JobPublic
from api.submissions import QUOTA_WINDOW, PendingSubmission, SubmissionWriter
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
    Target,
    cancel_job,
    delete_job,
    get_job,
    session_scope,
)

__all__ = [
    "QUOTA_WINDOW",  # re-exported from api.submissions
    "cancel_owned_job",
    "check_candidate",
    "check_owned_job",
    "check_script",
    "check_text",
    "delete_owned_job",
    "find_bundled_problem",
    "get_owned_job",
    "resolve_problem",
    "resolve_profile",
    "submit_evaluation",
    "submit_job",
    "unknown_problem_message",
]

#: Parsed posted problems kept (by content): a client that posts the same file again is not re-parsed.
_POSTED_PROBLEMS_CACHED = 64
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


# -- profiles and submissions ----------------------------------------------------------------------


def resolve_profile(name: str | None, model: str | None, settings: Settings) -> tuple[str, str]:
    """The profile's name and the model the job asks for (the request's, else the profile's)."""
    profile_name = name or settings.default_llm_profile
    profile = settings.llm_profiles.get(profile_name)
    if profile is None:
        known = ", ".join(sorted(settings.llm_profiles)) or "none configured"
        prefix = profile_name.partition(":")[0]
        hint = (f"; to choose a model, send llm_profile {prefix!r} and llm_model "
                f"{profile_name.partition(':')[2]!r}" if ":" in profile_name and prefix in settings.llm_profiles
                else "")
        raise InvalidInput(
            f"llm_profile {profile_name!r} is not configured on this server; choose one of: {known}{hint}",
            code="unknown_llm_profile",
        )
    return profile_name, model or profile.model


@functools.lru_cache(maxsize=_POSTED_PROBLEMS_CACHED)
def _parse_posted(digest: str, source: str) -> Problem:
    # Keyed by the digest too, so two sources never share an entry whatever their hashes do.
    return parse_problem(source, problem_id=POSTED_PROBLEM_ID)


def _resolve_posted(source: str) -> Problem:
    check_text("problem_source", source, code="invalid_problem")
    return _parse_posted(hashlib.sha256(source.encode()).hexdigest(), source)


async def _resolve_request_problem(problem_id: str | None, problem_source: str | None) -> Problem:
    """`resolve_problem` without blocking the event loop: a bundled id is a lookup; a posted source
    is parsed on a thread, once per distinct source (clients resubmit the same file)."""
    if problem_id is not None:
        return resolve_problem(problem_id=problem_id, problem_source=None)
    assert problem_source is not None  # the schema requires exactly one
    return await run_in_threadpool(_resolve_posted, problem_source)


def check_profile_key(profile_name: str, settings: Settings) -> None:
    """A profile whose key variable is unset would fail every request with a 401, after retries:
    refused now. The API's environment is its workers' (``kernelloop up`` starts them with it; the
    compose file gives both the same variables), so what it lacks, they lack.

    Raises:
        InvalidInput: the profile needs a key that is not set.
    """
    message = settings.llm_profiles[profile_name].missing_key_message(profile_name, "where the service runs")
    if message is not None:
        raise InvalidInput(f"{message}; then restart the service", code="llm_key_missing")


def check_script(profile_name: str, settings: Settings, problem_id: str | None, target: Target) -> None:
    """The scripted LLM answers from a script per bundled problem and target: a job it has no script
    for is refused now, not failed later by the worker (a lookup of names; nothing is run).

    Raises:
        InvalidInput: the profile is a scripted one and there is no script.
    """
    if settings.llm_profiles[profile_name].provider != "scripted":
        return
    if problem_id is None or not has_script(problem_id, target.value):
        raise InvalidInput(no_script_message(problem_id or "a posted problem", target.value),
                           code="no_script")


async def submit_job(*, writer: SubmissionWriter, settings: Settings, key: ApiKey, body: JobCreate) -> JobPublic:
    """Check, store and queue an agent job (stored by the app's `SubmissionWriter`, with others)."""
    problem = await _resolve_request_problem(body.problem_id, body.problem_source)
    profile, model = resolve_profile(body.llm_profile, body.llm_model, settings)
    target = body.target or Target(settings.default_target)
    check_script(profile, settings, problem.id if body.problem_id is not None else None, target)
    check_profile_key(profile, settings)
    return await writer.submit(
        PendingSubmission(
            key=key,
            kind=JobKind.AGENT,
            problem=problem,
            bundled=body.problem_id is not None,
            target=target,
            charge_cost=True,
            llm_profile=profile,
            llm_model=model,
            budgets=body.budgets,
            trajectories=body.trajectories or settings.default_trajectories,
        )
    )


async def submit_evaluation(
    *, writer: SubmissionWriter, settings: Settings, key: ApiKey, body: EvaluationCreate
) -> JobPublic:
    """Check, store and queue an evaluation job (one candidate, no LLM)."""
    problem = await _resolve_request_problem(body.problem_id, body.problem_source)
    await run_in_threadpool(check_candidate, body.candidate_source)
    return await writer.submit(
        PendingSubmission(
            key=key,
            kind=JobKind.EVALUATION,
            problem=problem,
            bundled=body.problem_id is not None,
            target=body.target or Target(settings.default_target),
            charge_cost=False,
            candidate_source=body.candidate_source,
        )
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
