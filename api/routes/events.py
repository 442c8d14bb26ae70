"""``/jobs/{id}/events``: the job's live event stream (Server-Sent Events), resumable."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import TypeAdapter
from starlette.concurrency import run_in_threadpool

from api import services
from api.deps import MAX_ID, CurrentKey, EventHubDep, JobId, MetricsDep, SessionFactoryDep, StreamOptionsDep
from api.errors import error_responses
from api.streaming import job_event_stream
from vocabulary.events import EVENT_PAYLOADS

router = APIRouter(prefix="/jobs/{job_id}", tags=["events"])

#: Each event as OpenAPI 3.2 describes Server-Sent Events (``itemSchema``: one object per event).
#: ``data`` is JSON: one of the payloads of `vocabulary.events`, by the event's type (``x-payloads``).
_EVENT_SCHEMA = {
    "type": "object",
    "properties": {
        "data": {"type": "string", "contentMediaType": "application/json",
                 "contentSchema": {"anyOf": [TypeAdapter(cls).json_schema() for cls in EVENT_PAYLOADS.values()]}},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer", "minimum": 0},
    },
    "x-payloads": {event_type: cls.__name__ for event_type, cls in EVENT_PAYLOADS.items()},
}
_STREAM_DOC = {
    "content": {"text/event-stream": {"itemSchema": _EVENT_SCHEMA}},
    "description": "`id:` the job's event number, `event:` its type (`state`, `attempt`, `cancel_requested`, …), "
    "`data:` its JSON payload; `: keep-alive` comments while idle; a final `event: end` once the job is over.",
}


@router.get(
    "/events",
    response_class=Response,  # the stream's own type is documented above; errors stay JSON
    responses={200: _STREAM_DOC, **error_responses(401, 404, 422)},
)
async def stream_events(
    request: Request,
    job_id: JobId,
    key: CurrentKey,
    factory: SessionFactoryDep,
    options: StreamOptionsDep,
    hub: EventHubDep,
    metrics: MetricsDep,
    after: Annotated[int, Query(ge=0, le=MAX_ID, description="Start after this event id.")] = 0,
    last_event_id: Annotated[
        int | None,
        Header(alias="Last-Event-ID", ge=0, le=MAX_ID, description="Resume point; wins over `after`."),
    ] = None,
) -> StreamingResponse:
    """Stream the job's events as Server-Sent Events; reconnect with Last-Event-ID to resume."""
    await run_in_threadpool(lambda: services.check_owned_job(factory=factory, key=key, job_id=job_id))
    stream = job_event_stream(
        factory=factory,
        hub=hub,
        job_id=job_id,
        after=last_event_id if last_event_id is not None else after,
        options=options,
        metrics=metrics,
        is_disconnected=request.is_disconnected,
    )
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
