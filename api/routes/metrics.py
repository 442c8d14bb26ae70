"""``/metrics``: Prometheus exposition (open, like most scrape targets: aggregate counts only)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_CONTENT_TYPE

from api.deps import MetricsDep, SessionDep
from api.metrics import exposition
from store import JobState, read_store_counts
from vocabulary.verdict import Status

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {
                CONTENT_TYPE_LATEST: {"schema": {"type": "string"}},
                OPENMETRICS_CONTENT_TYPE: {"schema": {"type": "string"}},
            },
            "description": "Prometheus text (OpenMetrics when the Accept header asks for it).",
        }
    },
)
def read_metrics(request: Request, session: SessionDep, metrics: MetricsDep) -> Response:
    """Requests by route and status, latency, open streams, jobs by state, attempts by status, and the
    workers' metrics where they share this machine (`kernelloop up`)."""
    body, content_type = exposition(
        metrics,
        read_store_counts(session=session),
        job_states=[s.value for s in JobState],
        statuses=[s.value for s in Status],
        accept=request.headers.get("accept"),
    )
    return Response(body, media_type=content_type)
