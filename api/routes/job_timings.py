"""``/jobs/{id}/timings``: where the job's evaluation time went (time to verdict, `api.timings`)."""

from __future__ import annotations

from fastapi import APIRouter

from api import services
from api.deps import CurrentKey, JobId, SessionDep
from api.errors import error_responses
from api.timings import JobTimingsPublic
from store import job_timings

__all__ = ["router"]

router = APIRouter(prefix="/jobs/{job_id}", tags=["jobs"])


@router.get("/timings", response_model=JobTimingsPublic, responses=error_responses(401, 404, 422))
def read_job_timings(job_id: JobId, key: CurrentKey, session: SessionDep) -> JobTimingsPublic:
    """Time to verdict: each attempt's seconds per stage and kind, p50 and p95 per stage (queue wait
    first), lane seconds per attempt kind, and verdicts per hour of lane time."""
    services.get_owned_job(session=session, key=key, job_id=job_id)
    return JobTimingsPublic.of(job_timings(session=session, job_id=job_id))
