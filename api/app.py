"""`create_app`: the FastAPI application, built from a `Settings` and nothing global.

The engine, the session factory, the dispatcher and the event hub of the live streams are made
when the app starts (its lifespan) and kept on ``app.state``; they are disposed of when it
stops. Two apps in one process (tests) share nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import Connection, Engine
from starlette.concurrency import run_in_threadpool

from api.deps import VerifiedKeys
from api.dispatch import CeleryDispatcher, Dispatcher, NullDispatcher
from api.errors import install_error_handlers
from api.metrics import RequestMetrics
from api.middleware import BodyLimitMiddleware, MetricsMiddleware, ServerTimingMiddleware
from api.routes import api_router, dashboard, dashboard_insights, docs, job_problem
from api.streaming import EventHub, StreamOptions
from api.submissions import SubmissionWriter
from config import Settings
from problems import bundled_problems
from store import make_engine, make_session_factory

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_DESCRIPTION = """\
An LLM agent writes CUDA kernels for a PyTorch reference model; a sandboxed referee judges them.

* **Auth**: every route that creates or reads jobs needs an `X-API-Key` header (an admin creates
  keys with `kernelloop keys create`). A key sees its own jobs; admin keys see all. `/problems`,
  `/health` and `/metrics` are open.
* **Errors**: every 4xx/5xx body is `{"detail": "...", "code": "..."}`; `detail` says what to fix.
* **Live**: `GET /jobs/{id}/events` streams Server-Sent Events; resume with `Last-Event-ID`.
* The API never runs problem or candidate code: it checks sources statically and queues them.
"""


#: Database connections an API process opens at start-up (at most its pool's size).
WARM_CONNECTIONS = 16


def _open_connections(engine: Engine, count: int) -> None:
    """Open ``count`` connections of the pool at once and give them back (they stay open). Best
    effort: a database that is down now is the first request's problem, as before."""
    connections: list[Connection] = []
    try:
        for _ in range(count):
            connections.append(engine.connect())
    except Exception as exc:  # noqa: BLE001 (logged: the API starts anyway, /health reports the database)
        log.warning("opening database connections at start-up failed: %s: %s", type(exc).__name__, exc)
    finally:
        for connection in connections:
            connection.close()


def _default_dispatcher(settings: Settings) -> Dispatcher:
    return NullDispatcher() if settings.embedded else CeleryDispatcher(settings)


def create_app(
    settings: Settings,
    *,
    dispatcher: Dispatcher | None = None,
    stream_options: StreamOptions | None = None,
) -> FastAPI:
    """The API app.

    Args:
        settings: the service settings (database URL, broker URL, limits, LLM profiles).
        dispatcher: how new jobs are announced; default: Celery when ``settings.broker_url`` is
            set, else nothing (the embedded worker polls the database).
        stream_options: pacing of event streams (`StreamOptions` defaults otherwise).
    """
    metrics = RequestMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.resolved_database_url, pool_size=settings.api_db_pool_size)
        own_dispatcher = dispatcher is None
        active = _default_dispatcher(settings) if dispatcher is None else dispatcher
        app.state.settings = settings
        app.state.engine = engine
        app.state.session_factory = make_session_factory(engine)
        app.state.dispatcher = active
        app.state.metrics = metrics
        app.state.stream_options = options = stream_options or StreamOptions()
        app.state.event_hub = hub = EventHub(app.state.session_factory, poll_interval_s=options.poll_interval_s)
        app.state.verified_keys = VerifiedKeys(settings.api_key_cache_s)
        app.state.submission_writer = writer = SubmissionWriter(
            factory=app.state.session_factory,
            dispatcher=active,
            settings=settings,
            metrics=metrics,
            max_batch=settings.api_submit_batch_max,
        )
        writer.start()
        # Before the first request rather than during it: the bundled problems are parsed once
        # (a burst of first requests would otherwise parse them once per thread), some database
        # connections are opened (on PostgreSQL a backend process each, which a burst would
        # otherwise start while it waits), and the broker connection is opened.
        await run_in_threadpool(bundled_problems)
        await run_in_threadpool(_open_connections, engine, min(settings.api_db_pool_size, WARM_CONNECTIONS))
        if isinstance(active, CeleryDispatcher):
            await run_in_threadpool(active.connect)
        try:
            yield
        finally:
            await writer.aclose()
            await hub.aclose()
            if own_dispatcher and isinstance(active, CeleryDispatcher):
                active.close()
            engine.dispose()

    app = FastAPI(
        title="kernelloop",
        version="0.1.0",
        summary="CUDA kernels written by an LLM, judged by a sandboxed referee.",
        description=_DESCRIPTION,
        lifespan=lifespan,
        # /docs and /redoc come from api.routes.docs, with their assets served here (no CDN).
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    app.include_router(api_router)
    app.include_router(job_problem.router)
    app.include_router(dashboard.router)
    app.include_router(dashboard_insights.router)
    app.include_router(docs.router)
    # Added last = outermost: metrics see every answer, including the body limit's 413s.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(ServerTimingMiddleware)
    return app
