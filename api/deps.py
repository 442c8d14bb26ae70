"""Typed dependencies: what a route may ask for, each read from ``app.state`` (built at start-up).

The dependencies that only read ``app.state`` are ``async``: FastAPI runs a plain ``def``
dependency on a worker thread, a hop (and a wait for a free thread under load) per dependency per
request for a dictionary lookup. ``SessionDep`` is for reads: a session open for the request,
never committed. Writes go through `api.services` (new jobs through `api.submissions`), which
commit before answering. ``CurrentKey`` checks ``X-API-Key`` in a short session of its own (or
finds it among the keys verified in the last seconds, `VerifiedKeys`), so a long response (an
event stream) holds no database connection. Browsers (the dashboard) authenticate with the session cookie of
`api.dashboard.session` instead; a header, when present, always wins over a cookie.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Request, Security
from fastapi.security import APIKeyHeader
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from api.dashboard.session import CSRF_HEADER, SAFE_METHODS, codec_for, read_session
from api.dispatch import Dispatcher
from api.errors import ApiError, Unauthorized
from api.metrics import RequestMetrics
from api.streaming import EventHub, StreamOptions
from api.submissions import SubmissionWriter
from config import Settings
from store import ApiKey, hash_api_key, session_scope, verify_api_key

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
    "SubmissionWriterDep",
    "VerifiedKeys",
    "browser_key",
    "lookup_api_key",
]

API_KEY_HEADER = "X-API-Key"
#: The largest id a path or cursor may carry: PostgreSQL's ``integer`` (what the id columns are);
#: a larger number names nothing, and SQLite would overflow on it.
MAX_ID = 2**31 - 1

_api_key_header = APIKeyHeader(
    name=API_KEY_HEADER,
    auto_error=False,
    description="An API key from `kernelloop keys create`; a key sees only its own jobs (admin keys see all). "
    "The same key is accepted as `Authorization: Bearer kl_…` (X-API-Key wins if both are sent).",
)
_BEARER = "bearer"


def _bearer_token(request: Request) -> str | None:
    """The key of ``Authorization: Bearer KEY``, what most HTTP clients and SDKs send. Read here,
    not declared as a second security scheme: the OpenAPI document keeps one way to authenticate
    (its description names this one), and a client sending both is told nothing contradictory."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == _BEARER else None


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_session_factory(request: Request) -> sessionmaker[Session]:
    return request.app.state.session_factory


def get_session(factory: Annotated[sessionmaker[Session], Depends(get_session_factory)]) -> Iterator[Session]:
    with factory() as session:
        yield session


async def get_dispatcher(request: Request) -> Dispatcher:
    return request.app.state.dispatcher


async def get_metrics(request: Request) -> RequestMetrics:
    return request.app.state.metrics


async def get_submission_writer(request: Request) -> SubmissionWriter:
    return request.app.state.submission_writer


async def get_stream_options(request: Request) -> StreamOptions:
    return request.app.state.stream_options


async def get_event_hub(request: Request) -> EventHub:
    return request.app.state.event_hub


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionFactoryDep = Annotated[sessionmaker[Session], Depends(get_session_factory)]
SessionDep = Annotated[Session, Depends(get_session)]
DispatcherDep = Annotated[Dispatcher, Depends(get_dispatcher)]
MetricsDep = Annotated[RequestMetrics, Depends(get_metrics)]
StreamOptionsDep = Annotated[StreamOptions, Depends(get_stream_options)]
EventHubDep = Annotated[EventHub, Depends(get_event_hub)]
SubmissionWriterDep = Annotated[SubmissionWriter, Depends(get_submission_writer)]


class VerifiedKeys:
    """Keys verified in the last ``ttl_s`` seconds, by digest: most requests of a client then
    need no database round trip (nor a thread) to authenticate.

    Only live keys are kept (an unknown key is looked up every time, so a new key works at
    once). A revoked key is refused by this process at the latest ``ttl_s`` later; it can never
    create a job meanwhile (`api.submissions` re-reads the key under its quota lock). The
    entries are detached rows, read and never changed. ``ttl_s == 0`` keeps nothing.
    """

    #: Distinct keys kept at most; beyond, the cache starts again empty (a bound, not an LRU).
    MAX_ENTRIES = 4096

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._entries: dict[str, tuple[float, ApiKey]] = {}
        #: Lookups in progress: a burst of requests with one new key makes one lookup, not one each.
        self._pending: dict[str, asyncio.Future[ApiKey | None]] = {}

    async def verify(self, factory: sessionmaker[Session], plaintext: str) -> ApiKey | None:
        """The live key with this plaintext, from the cache or the database (`store.verify_api_key`)."""
        digest = hash_api_key(plaintext)
        key = self.get(digest)
        if key is not None:
            return key
        pending = self._pending.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[ApiKey | None] = asyncio.get_running_loop().create_future()
        self._pending[digest] = future
        try:
            key = await run_in_threadpool(lookup_api_key, factory, plaintext)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when no one else waited
            raise
        else:
            future.set_result(key)
            if key is not None:
                self.put(digest, key)
            return key
        finally:
            del self._pending[digest]

    def get(self, digest: str) -> ApiKey | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[0] <= time.monotonic():
            self._entries.pop(digest, None)
            return None
        return entry[1]

    def put(self, digest: str, key: ApiKey) -> None:
        if self._ttl_s <= 0:
            return
        if len(self._entries) >= self.MAX_ENTRIES:
            self._entries.clear()
        self._entries[digest] = (time.monotonic() + self._ttl_s, key)


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


def lookup_api_key(factory: sessionmaker[Session], plaintext: str) -> ApiKey | None:
    """`store.verify_api_key` in a short session of its own, uncached (`VerifiedKeys` caches it)."""
    with session_scope(factory) as session:
        return verify_api_key(session=session, plaintext=plaintext)


async def get_current_key(
    request: Request,
    factory: SessionFactoryDep,
    plaintext: Annotated[str | None, Security(_api_key_header)] = None,
) -> ApiKey:
    """The live key of the request: the ``X-API-Key`` header, else ``Authorization: Bearer``, else
    the dashboard's session cookie; 401 when none names a live key. A header key verified in the
    last ``Settings.api_key_cache_s`` seconds is not looked up again (`VerifiedKeys`)."""
    plaintext = plaintext or _bearer_token(request)
    if not plaintext:
        key = await run_in_threadpool(_key_from_cookie, request, factory)
        if key is not None:
            return key
        raise Unauthorized(
            f"send an API key in the {API_KEY_HEADER} header or as `Authorization: Bearer KEY` (an admin creates "
            "one with `kernelloop keys create`), or sign in at /login in a browser",
            code="missing_api_key",
            headers={"WWW-Authenticate": API_KEY_HEADER},
        )
    key = await request.app.state.verified_keys.verify(factory, plaintext)
    if key is None:
        raise Unauthorized(
            "the API key is unknown or revoked; ask an admin for a new key",
            code="invalid_api_key",
            headers={"WWW-Authenticate": API_KEY_HEADER},
        )
    return key


CurrentKey = Annotated[ApiKey, Depends(get_current_key)]
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="The job's id.")]
