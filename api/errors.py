"""The API's errors and the one place where exceptions become HTTP responses.

Every error body is ``{"detail": str, "code": str}`` (plus ``errors`` for request validation),
with ``detail`` saying what to fix. Exceptions raised below the API (the store, the problem
parser) keep their own types; `install_error_handlers` maps them at the edge::

    ApiError                       status  code
    ├── Unauthorized               401     missing_api_key | invalid_api_key
    ├── NoSuchResource             404     not_found | no_best_attempt
    ├── InvalidInput               422     invalid_problem | unknown_problem | invalid_candidate | …
    ├── QuotaExceeded              429     quota_exceeded
    └── QueueUnavailable           503     queue_unavailable
    store.NotFound                 404     not_found
    store.IllegalTransition        409     illegal_transition
    problems.ProblemFormatError    422     invalid_problem
    RequestValidationError         422     invalid_request
    starlette HTTPException        its status, code from the status (e.g. 413 body_too_large,
                                   400 invalid_json for a body that is not UTF-8)
    anything else                  500     internal_error (logged; no detail leaks)

The one HTML answer: the dashboard's `PageNotFound` becomes its not-found page (404).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api.schemas import ErrorPublic
from problems import ProblemFormatError
from store import IllegalTransition, NotFound
from vocabulary.wire import JsonObject, JsonValue

__all__ = [
    "ApiError",
    "InvalidInput",
    "NoSuchResource",
    "QueueUnavailable",
    "QuotaExceeded",
    "Unauthorized",
    "error_body",
    "error_responses",
    "install_error_handlers",
]

log = logging.getLogger(__name__)

#: Codes for errors Starlette raises itself (unknown route, wrong method, oversized body …).
_STATUS_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "quota_exceeded",
    503: "unavailable",
}


#: What FastAPI says when a body cannot be decoded at all (not UTF-8); reworded into what to do.
_FASTAPI_BODY_ERROR = "There was an error parsing the body"


_DESCRIPTIONS = {
    400: "The body could not be decoded as JSON text.",
    401: "Missing, unknown or revoked X-API-Key.",
    404: "No such resource, or not yours.",
    409: "The job is in a state that forbids this.",
    413: "Request body too large.",
    422: "Invalid input; `detail` says what to fix.",
    429: "A quota of the key is spent.",
    503: "A dependency (database, broker) is unavailable.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error statuses a route may answer (all share `ErrorPublic`)."""
    return {status: {"model": ErrorPublic, "description": _DESCRIPTIONS[status]} for status in statuses}


class ApiError(Exception):
    """An error the client can act on; ``detail`` says how."""

    status_code = 400
    code = "bad_request"

    def __init__(self, detail: str, *, code: str | None = None, headers: dict[str, str] | None = None,
                 extra: JsonObject | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.headers = headers
        #: More fields of the body, for clients to branch on (e.g. a 429's ``quota``).
        self.extra = extra or {}


class Unauthorized(ApiError):
    status_code = 401
    code = "invalid_api_key"


class NoSuchResource(ApiError):
    status_code = 404
    code = "not_found"


class InvalidInput(ApiError):
    status_code = 422
    code = "invalid_request"


class QuotaExceeded(ApiError):
    status_code = 429
    code = "quota_exceeded"


class QueueUnavailable(ApiError):
    status_code = 503
    code = "queue_unavailable"


def error_body(detail: str, code: str, **extra: JsonValue) -> JsonObject:
    """An error response's JSON (`ErrorPublic`): the detail, the code, and ``extra`` fields."""
    return {"detail": detail, "code": code, **extra}


class _ErrorResponse(JSONResponse):
    """ASCII-escaped JSON: an error may quote the client's input, which can hold lone surrogates
    that UTF-8 cannot encode; escaping keeps the error an error instead of a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _json(status: int, detail: str, code: str, headers: dict[str, str] | None = None,
          **extra: JsonValue) -> JSONResponse:
    return _ErrorResponse(jsonable_encoder(error_body(detail, code, **extra)), status_code=status, headers=headers)


def _field(loc: object) -> str:
    # ("body", "budgets", "turns") -> "budgets.turns"; ("query", "limit") -> "limit".
    if not isinstance(loc, tuple | list):
        return "body"
    parts = [str(p) for p in loc[1:]] if loc and loc[0] in ("body", "query", "path", "header") else list(map(str, loc))
    return ".".join(parts) or "body"


def _validation_message(error: Mapping[str, object]) -> str:
    """One of FastAPI's validation errors (pydantic's error details) in words."""
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{_field(error.get('loc', ()))}: {message}"


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return _json(exc.status_code, exc.detail, exc.code, exc.headers, **exc.extra)


async def _not_found(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, NotFound)
    return _json(404, f"{exc.kind} {exc.ident} not found", "not_found")


async def _illegal_transition(_request: Request, exc: Exception) -> JSONResponse:
    return _json(409, str(exc), "illegal_transition")


async def _problem_format(_request: Request, exc: Exception) -> JSONResponse:
    return _json(422, f"problem_source: {exc}", "invalid_problem")


async def _request_validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"field": _field(e.get("loc", ())), "message": str(e.get("msg", "")).removeprefix("Value error, ")}
        for e in exc.errors()
    ]
    detail = "; ".join(_validation_message(e) for e in exc.errors()) or "invalid request"
    return _json(422, detail, "invalid_request", errors=errors)


def _allowed_methods(request: Request) -> str:
    """Every method of every route on this path (Starlette's 405 names only the first route's)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "__none__"})
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _STATUS_CODES.get(exc.status_code, "error")
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 400 and detail == _FASTAPI_BODY_ERROR:
        code = "invalid_json"
        detail = "the body is not valid JSON text; send UTF-8 JSON with Content-Type: application/json"
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return _json(exc.status_code, detail, code, headers or None)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _json(500, "internal error; the server logged it", "internal_error")


def install_error_handlers(app: FastAPI) -> None:
    """Map exceptions to ``{"detail", "code"}`` responses, and `PageNotFound` to the dashboard's
    not-found page (the only place that does)."""
    # Imported here: the dashboard's module imports this one (through `api.deps`).
    from api.dashboard.browser import PageNotFound, page_not_found_response

    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(IllegalTransition, _illegal_transition)
    app.add_exception_handler(PageNotFound, page_not_found_response)
    app.add_exception_handler(ProblemFormatError, _problem_format)
    app.add_exception_handler(RequestValidationError, _request_validation)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(Exception, _unexpected)
