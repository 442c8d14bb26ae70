"""Pure ASGI middleware: the request-body limit, request metrics and the ``Server-Timing`` header.

Pure ASGI (not ``BaseHTTPMiddleware``) so that streaming responses (SSE) pass through untouched
and the body limit can count bytes as they arrive.
"""

from __future__ import annotations

import json
import time
from contextvars import ContextVar

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_body
from api.metrics import RequestMetrics

__all__ = ["BodyLimitMiddleware", "BodyTooLarge", "MetricsMiddleware", "ServerTimingMiddleware", "add_server_timing"]

#: The phases the current request's code reported, for its ``Server-Timing`` header.
_phases: ContextVar[list[tuple[str, float]] | None] = ContextVar("server_timing_phases", default=None)


def add_server_timing(name: str, seconds: float) -> None:
    """Report a phase of the current request in its ``Server-Timing`` header (outside a request
    handled by `ServerTimingMiddleware`: nothing)."""
    phases = _phases.get()
    if phases is not None:
        phases.append((name, seconds))


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(
            status_code=413,
            detail=f"request body larger than {limit} bytes; send a smaller problem or candidate source",
        )


class BodyLimitMiddleware:
    """Refuses bodies over ``max_bytes`` with 413: at once from ``Content-Length``, else while
    streaming (chunked uploads, or a ``Content-Length`` that lies), before the route parses them."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _send_json(send, 413, BodyTooLarge(self.max_bytes).detail, "body_too_large")
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # Raised inside the route's body read: the app's HTTPException handler answers.
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge as exc:
            if started:
                raise
            await _send_json(send, 413, str(exc.detail), "body_too_large")


class MetricsMiddleware:
    """Counts and times every HTTP request by its route template (``/jobs/{job_id}``), not its
    path, so the label set stays bounded."""

    def __init__(self, app: ASGIApp, *, metrics: RequestMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        observed = False

        def observe(status: int) -> None:
            nonlocal observed
            if observed:
                return
            observed = True
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe(
                method=scope["method"], route=route, status=status, seconds=time.perf_counter() - start
            )

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                observe(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        except Exception:
            observe(500)
            raise


class ServerTimingMiddleware:
    """Adds ``Server-Timing: app;dur=<ms>`` to every answer (the app's time from the request's
    arrival to its answer), followed by the phases its code reported (`add_server_timing`, e.g. a
    submission's wait for its batch and the batch's transaction). Browsers' developer tools show
    it; the load run reads it to tell where a submission's time went."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        phases: list[tuple[str, float]] = []
        token = _phases.set(phases)

        async def timing_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                value = ", ".join(f"{name};dur={seconds * 1000:.1f}"
                                  for name, seconds in [("app", time.perf_counter() - start), *phases])
                message = {**message, "headers": [*message.get("headers", ()), (b"server-timing", value.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, timing_send)
        finally:
            _phases.reset(token)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _send_json(send: Send, status: int, detail: str, code: str) -> None:
    body = json.dumps(error_body(detail, code)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
