"""``/models``: a model optimised region by region (one job per region), and its whole-model verdict."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status
from starlette.concurrency import run_in_threadpool

from api import modelruns
from api.deps import MAX_ID, CurrentKey, DispatcherDep, SessionDep, SessionFactoryDep, SettingsDep
from api.errors import error_responses
from api.model_schemas import ModelRunCreate, ModelRunPublic
from api.schemas import Page
from store import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, list_model_runs, region_jobs

router = APIRouter(prefix="/models", tags=["models"])
RunId = Annotated[int, Path(ge=1, le=MAX_ID, description="The model run's id.")]


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=ModelRunPublic,
             responses=error_responses(400, 401, 413, 422, 429, 503))
async def submit_model_run(body: ModelRunCreate, key: CurrentKey, response: Response, factory: SessionFactoryDep,
                           settings: SettingsDep, dispatcher: DispatcherDep) -> ModelRunPublic:
    """Queue a model run: one agent job per selected region of a profiled model, budgets split by share."""
    run = await run_in_threadpool(modelruns.submit_model_run, factory=factory, dispatcher=dispatcher,
                                  settings=settings, key=key, body=body)
    response.headers["Location"] = run.links["self"]
    return run


@router.get("", response_model=Page[ModelRunPublic], responses=error_responses(401, 422))
def read_model_runs(
    key: CurrentKey, session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> Page[ModelRunPublic]:
    """List your model runs (every run for an admin key), newest first."""
    page = list_model_runs(session=session, owner_id=None if key.is_admin else key.id, limit=limit, offset=offset)
    items = [ModelRunPublic.from_run(run, region_jobs(session=session, run_id=run.id)) for run in page.items]
    return Page(items=items, next_cursor=page.next_cursor, total=page.total)


@router.get("/{run_id}", response_model=ModelRunPublic, responses=error_responses(401, 404, 422))
def read_model_run(run_id: RunId, key: CurrentKey, session: SessionDep) -> ModelRunPublic:
    """One model run: its regions with their jobs, the prediction, and the whole-model report."""
    return modelruns.get_owned_model_run(session=session, key=key, run_id=run_id)


@router.post("/{run_id}/cancel", response_model=ModelRunPublic, responses=error_responses(401, 404, 422))
def cancel_model_run(run_id: RunId, key: CurrentKey, factory: SessionFactoryDep) -> ModelRunPublic:
    """Cancel a model run: its jobs that have not ended, and the run."""
    return modelruns.cancel_owned_model_run(factory=factory, key=key, run_id=run_id)
