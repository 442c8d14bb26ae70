"""``/evaluations``: judge one candidate against a problem, no LLM (a job of kind ``evaluation``)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from api import services
from api.deps import CurrentKey, SettingsDep, SubmissionWriterDep
from api.errors import error_responses
from api.schemas import EvaluationCreate, JobPublic

router = APIRouter(prefix="/evaluations", tags=["evaluations"])


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic,
    responses=error_responses(400, 401, 413, 422, 429, 503),
)
async def create_evaluation(
    body: EvaluationCreate, key: CurrentKey, response: Response, writer: SubmissionWriterDep, settings: SettingsDep
) -> JobPublic:
    """Queue one evaluation of your candidate; its verdict becomes attempt 1 of the job at the Location."""
    job = await services.submit_evaluation(writer=writer, settings=settings, key=key, body=body)
    response.headers["Location"] = job.links["self"]
    return job
