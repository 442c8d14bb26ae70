"""``/jobs/{id}/messages``: the LLM conversation of every trajectory, as stored."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api import services
from api.deps import MAX_ID, CurrentKey, JobId, SessionDep
from api.errors import error_responses
from api.schemas import MAX_TRAJECTORIES, MessagePublic, Page
from store import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, list_messages

router = APIRouter(prefix="/jobs/{job_id}", tags=["messages"])


@router.get("/messages", response_model=Page[MessagePublic], responses=error_responses(401, 404, 422))
def read_messages(
    job_id: JobId,
    key: CurrentKey,
    session: SessionDep,
    trajectory: Annotated[
        int | None, Query(ge=0, lt=MAX_TRAJECTORIES, description="Only this trajectory (0-based index).")
    ] = None,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Messages with ids above this (`next_cursor`).")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
) -> Page[MessagePublic]:
    """A job's messages in the order they were stored."""
    services.get_owned_job(session=session, key=key, job_id=job_id)
    page = list_messages(session=session, job_id=job_id, trajectory_index=trajectory, after_id=after, limit=limit)
    return Page(items=[MessagePublic.from_message(m) for m in page.items], next_cursor=page.next_cursor, total=None)
