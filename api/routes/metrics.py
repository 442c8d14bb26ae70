"""``/metrics``: Prometheus text format (open, like most scrape targets: aggregate counts only)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.deps import MetricsDep, SessionDep
from api.metrics import CONTENT_TYPE, render
from harness.verdict import Status
from store import JobState, read_store_counts

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}, "description": "Prometheus text."}},
)
def read_metrics(session: SessionDep, metrics: MetricsDep) -> Response:
    """Requests by route and status, latency histogram, open streams, jobs by state, attempts by status."""
    body = render(
        metrics,
        read_store_counts(session=session),
        job_states=[s.value for s in JobState],
        statuses=[s.value for s in Status],
    )
    return Response(body, media_type=CONTENT_TYPE)
