"""One router per resource; `api_router` joins them. Routes are thin: parse, call, answer."""

from __future__ import annotations

from fastapi import APIRouter

from api.routes import (
    attempts,
    evaluations,
    events,
    health,
    job_timings,
    jobs,
    messages,
    metrics,
    models,
    problems,
)

__all__ = ["api_router"]

api_router = APIRouter()
for _module in (jobs, attempts, job_timings, messages, events, evaluations, models, problems, health, metrics):
    api_router.include_router(_module.router)
