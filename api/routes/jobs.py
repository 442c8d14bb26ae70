"""``/jobs``: submit an agent job, list, read, cancel, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from api import services
from api.deps import MAX_ID, CurrentKey, JobId, SessionDep, SessionFactoryDep, SettingsDep, SubmissionWriterDep
from api.errors import error_responses
from api.schemas import CancelPublic, JobCreate, JobPublic, Page
from store import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, CancelOutcome, JobState, Target, list_jobs

router = APIRouter(prefix="/jobs", tags=["jobs"])


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic,
    responses=error_responses(400, 401, 413, 422, 429, 503),
)
async def submit_job(
    body: JobCreate, key: CurrentKey, response: Response, writer: SubmissionWriterDep, settings: SettingsDep
) -> JobPublic:
    """Queue an agent job: an LLM writes kernels for the problem; watch it at the Location."""
    job = await services.submit_job(writer=writer, settings=settings, key=key, body=body)
    response.headers["Location"] = job.links["self"]
    return job


@router.get("", response_model=Page[JobPublic], responses=error_responses(401, 422))
def read_jobs(
    key: CurrentKey,
    session: SessionDep,
    state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
    target: Annotated[Target | None, Query(description="Only jobs on this target.")] = None,
    problem: Annotated[
        str | None, Query(max_length=128, description="Only jobs of this bundled id, or of a posted source's sha256.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    offset: Annotated[int, Query(ge=0, le=MAX_ID, description="`next_cursor` of the previous page.")] = 0,
) -> Page[JobPublic]:
    """List your jobs (every job for an admin key), newest first."""
    owner = None if key.is_admin else key.id
    page = list_jobs(session=session, owner_id=owner, state=state, target=target, problem=problem, limit=limit,
                     offset=offset)
    return Page(items=[JobPublic.from_job(j) for j in page.items], next_cursor=page.next_cursor, total=page.total)


@router.get("/{job_id}", response_model=JobPublic, responses=error_responses(401, 404, 422))
def read_job(job_id: JobId, key: CurrentKey, session: SessionDep) -> JobPublic:
    """One job: state, budgets, totals and its best attempt so far."""
    return JobPublic.from_job(services.get_owned_job(session=session, key=key, job_id=job_id))


@router.post(
    "/{job_id}/cancel",
    response_model=CancelPublic,
    responses={
        202: {"model": CancelPublic, "description": "Running: its worker stops at the next safe point."},
        **error_responses(401, 404, 409, 422),
    },
)
def request_cancel(job_id: JobId, key: CurrentKey, response: Response, factory: SessionFactoryDep) -> CancelPublic:
    """Cancel a job: a queued one at once (200), a running one at its next safe point (202)."""
    outcome, job = services.cancel_owned_job(factory=factory, key=key, job_id=job_id)
    if outcome is CancelOutcome.REQUESTED:
        response.status_code = status.HTTP_202_ACCEPTED
    return CancelPublic(outcome=outcome.value, job=job)


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=error_responses(401, 404, 409, 422),
)
def remove_job(job_id: JobId, key: CurrentKey, factory: SessionFactoryDep) -> Response:
    """Delete a finished job with its attempts, messages, events and posted code (409 while it runs)."""
    services.delete_owned_job(factory=factory, key=key, job_id=job_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
