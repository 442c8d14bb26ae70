"""Typed dependencies: what a route may ask for, each read from ``app.state`` (built at start-up).

``SessionDep`` is for reads: a session open for the request, never committed. Writes go through
`api.services`, which commits its own `store.session_scope` before answering. ``CurrentKey``
checks ``X-API-Key`` in a short session of its own, so a long response (an event stream) holds
no database connection. Browsers (the dashboard) authenticate with the session cookie of
`api.dashboard.session` instead; a header, when present, always wins over a cookie.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Request, Security
from fastapi.security import APIKeyHeader
from sqlalchemy.orm import Session, sessionmaker

from api.dashboard.session import CSRF_HEADER, SAFE_METHODS, codec_for, read_session
from api.dispatch import Dispatcher
from api.errors import ApiError, Unauthorized
from api.metrics import RequestMetrics
from api.streaming import EventHub, StreamOptions
from config import Settings
from store import ApiKey, session_scope, verify_api_key

__all__ = [
    "API_KEY_HEADER",
    "MAX_ID",
    "CsrfRejected",
    "CurrentKey",
    "DispatcherDep",
    "EventHubDep",
    "JobId",
    "MetricsDep",
    "SessionDep",
    "SessionFactoryDep",
    "SettingsDep",
    "StreamOptionsDep",
    "browser_key",
]

API_KEY_HEADER = "X-API-Key"
#: The largest id a path or cursor may carry: PostgreSQL's ``integer`` (what the id columns are);
#: a larger number names nothing, and SQLite would overflow on it.
MAX_ID = 2**31 - 1

_api_key_header = APIKeyHeader(
    name=API_KEY_HEADER,
    auto_error=False,
    description="An API key from `kernelloop keys create`; a key sees only its own jobs (admin keys see all).",
)


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session_factory(request: Request) -> sessionmaker[Session]:
    return request.app.state.session_factory


def get_session(factory: Annotated[sessionmaker[Session], Depends(get_session_factory)]) -> Iterator[Session]:
    with factory() as session:
        yield session


def get_dispatcher(request: Request) -> Dispatcher:
    return request.app.state.dispatcher


def get_metrics(request: Request) -> RequestMetrics:
    return request.app.state.metrics


def get_stream_options(request: Request) -> StreamOptions:
    return request.app.state.stream_options


def get_event_hub(request: Request) -> EventHub:
    return request.app.state.event_hub


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionFactoryDep = Annotated[sessionmaker[Session], Depends(get_session_factory)]
SessionDep = Annotated[Session, Depends(get_session)]
DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]
MetricsDep = Annotated[RequestMetrics, Depends(get_metrics)]
StreamOptionsDep = Annotated[StreamOptions, Depends(get_stream_options)]
EventHubDep = Annotated[EventHub, Depends(get_event_hub)]


class CsrfRejected(ApiError):
    """A cookie-authenticated unsafe request without its session's CSRF token."""

    status_code = 403
    code = "csrf_rejected"


def browser_key(request: Request, factory: sessionmaker[Session]) -> ApiKey | None:
    """The live key behind the request's session cookie (no CSRF check); ``None`` without one."""
    browser = read_session(request)
    if browser is None:
        return None
    with session_scope(factory) as session:
        key = session.get(ApiKey, browser.key_id)
    if key is None or key.is_revoked or not browser.matches(key.key_hash):
        return None
    return key


def _key_from_cookie(request: Request, factory: sessionmaker[Session]) -> ApiKey | None:
    """`browser_key`, CSRF-checked for unsafe methods."""
    browser = read_session(request)
    if browser is None:
        return None
    if request.method not in SAFE_METHODS and not codec_for(request).check_csrf(
        browser, request.headers.get(CSRF_HEADER)
    ):
        raise CsrfRejected(
            f"a request signed in by the session cookie must carry the page's {CSRF_HEADER} header; "
            "reload the page, or send an X-API-Key header instead"
        )
    return browser_key(request, factory)


def get_current_key(
    request: Request,
    factory: SessionFactoryDep,
    plaintext: Annotated[str | None, Security(_api_key_header)] = None,
) -> ApiKey:
    """The live key of the request: the ``X-API-Key`` header, else the dashboard's session
    cookie; 401 when neither names a live key."""
    if not plaintext:
        key = _key_from_cookie(request, factory)
        if key is not None:
            return key
        raise Unauthorized(
            f"send an API key in the {API_KEY_HEADER} header (an admin creates one with `kernelloop keys create`), "
            "or sign in at /login in a browser",
            code="missing_api_key",
            headers={"WWW-Authenticate": API_KEY_HEADER},
        )
    with session_scope(factory) as session:
        key = verify_api_key(session=session, plaintext=plaintext)
    if key is None:
        raise Unauthorized(
            f"the {API_KEY_HEADER} is unknown or revoked; ask an admin for a new key",
            code="invalid_api_key",
            headers={"WWW-Authenticate": API_KEY_HEADER},
        )
    return key


CurrentKey = Annotated[ApiKey, Depends(get_current_key)]
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="The job's id.")]
