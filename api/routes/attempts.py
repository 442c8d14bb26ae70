"""``/jobs/{id}/attempts`` and ``/jobs/{id}/best``: every evaluated candidate, and the fastest verified one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from api import services
from api.deps import MAX_ID, CurrentKey, JobId, SessionDep
from api.errors import NoSuchResource, error_responses
from api.schemas import AttemptDetail, AttemptPublic, BestPublic, Page
from store import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Attempt, Job, get_attempt, list_attempts

router = APIRouter(prefix="/jobs/{job_id}", tags=["attempts"])

AttemptN = Annotated[int, Path(ge=1, le=MAX_ID, description="The attempt's number within the job (from 1).")]


def _best(job: Job) -> Attempt:
    if job.best_attempt is None:
        raise NoSuchResource(
            f"job {job.id} has no verified attempt yet ({job.attempts_count} attempts, state {job.state.value}); "
            f"watch /jobs/{job.id}/events",
            code="no_best_attempt",
        )
    return job.best_attempt


@router.get("/attempts", response_model=Page[AttemptPublic], responses=error_responses(401, 404, 422))
def read_attempts(
    job_id: JobId,
    key: CurrentKey,
    session: SessionDep,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Attempts numbered above this (`next_cursor`).")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
) -> Page[AttemptPublic]:
    """A job's attempts in order, with their key figures (no source)."""
    services.get_owned_job(session=session, key=key, job_id=job_id)
    page = list_attempts(session=session, job_id=job_id, after_n=after, limit=limit)
    return Page(items=[AttemptPublic.from_attempt(a) for a in page.items], next_cursor=page.next_cursor, total=None)


@router.get("/attempts/{n}", response_model=AttemptDetail, responses=error_responses(401, 404, 422))
def read_attempt(job_id: JobId, n: AttemptN, key: CurrentKey, session: SessionDep) -> AttemptDetail:
    """One attempt with its source and its whole verdict."""
    services.get_owned_job(session=session, key=key, job_id=job_id)
    return AttemptDetail.from_attempt(get_attempt(session=session, job_id=job_id, n=n))


@router.get("/best", response_model=BestPublic, responses=error_responses(401, 404, 422))
def read_best(job_id: JobId, key: CurrentKey, session: SessionDep) -> BestPublic:
    """The job's fastest verified attempt (404 until one passes)."""
    best = _best(services.get_owned_job(session=session, key=key, job_id=job_id))
    return BestPublic(job_id=job_id, attempt=AttemptDetail.from_attempt(best), download=f"/jobs/{job_id}/best.py")


@router.get(
    "/best.py",
    # Response (no media type of its own): the error bodies stay documented as JSON.
    response_class=Response,
    responses={
        200: {"content": {"text/x-python": {"schema": {"type": "string"}}}, "description": "The source."},
        **error_responses(401, 404, 422),
    },
)
def download_best(job_id: JobId, key: CurrentKey, session: SessionDep) -> Response:
    """Download the best attempt's source, ready for `kernelloop replay`."""
    best = _best(services.get_owned_job(session=session, key=key, job_id=job_id))
    return Response(
        best.source,
        media_type="text/x-python",
        headers={
            "Content-Disposition": f'attachment; filename="job{job_id}_best.py"',
            "X-Attempt-N": str(best.n),
        },
    )
