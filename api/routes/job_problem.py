"""``/jobs/{id}/problem``: the problem a job was given, as stored (read-only; the API never runs it)."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api import services
from api.deps import CurrentKey, JobId, SessionDep
from api.errors import error_responses
from store import JsonField

__all__ = ["JobProblemPublic", "router"]

router = APIRouter(prefix="/jobs/{job_id}", tags=["jobs"])


class JobProblemPublic(BaseModel):
    job_id: int
    bundled_id: str | None = Field(description="The bundled id, or null for a posted source.")
    sha256: str
    source: str = Field(description="The problem file's text, exactly as the job's worker received it.")
    declarations: Mapping[str, JsonField] = Field(
        description="Its parsed declarations (mode, policy, tolerances, CPU sizes)."
    )


@router.get("/problem", response_model=JobProblemPublic, responses=error_responses(401, 404, 422))
def read_job_problem(job_id: JobId, key: CurrentKey, session: SessionDep) -> JobProblemPublic:
    """The job's problem source and declarations, for `kernelloop replay`."""
    problem = services.get_owned_job(session=session, key=key, job_id=job_id).problem
    return JobProblemPublic(
        job_id=job_id,
        bundled_id=problem.bundled_id,
        sha256=problem.sha256,
        source=problem.source,
        declarations=dict(problem.declarations or {}),
    )
