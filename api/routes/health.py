"""``/health``: can this API reach its database and broker? (Open: load balancers call it.)"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis
from fastapi import APIRouter, Request, Response, status
from sqlalchemy import Engine, text

from api.deps import SettingsDep
from api.schemas import ComponentHealth, HealthPublic

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)

#: A health check answers within a couple of seconds even when a dependency hangs.
PROBE_TIMEOUT_S = 1.0


def _timed(probe_name: str, probe: Callable[[], None]) -> ComponentHealth:
    start = time.perf_counter()
    try:
        probe()
    except Exception as exc:  # noqa: BLE001 (any failure of a probe is "unreachable", reported not raised)
        log.warning("health: %s unreachable: %r", probe_name, exc)
        return ComponentHealth(ok=False, latency_ms=None, error=type(exc).__name__)
    return ComponentHealth(ok=True, latency_ms=round(1000 * (time.perf_counter() - start), 3), error=None)


def _ping_database(engine: Engine) -> None:
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def _ping_broker(url: str) -> None:
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"only Redis brokers are checked, not {url.split(':', 1)[0]!r}")
    client = redis.Redis.from_url(url, socket_connect_timeout=PROBE_TIMEOUT_S, socket_timeout=PROBE_TIMEOUT_S)
    try:
        client.ping()
    finally:
        client.close()


@router.get(
    "/health",
    response_model=HealthPublic,
    responses={503: {"model": HealthPublic, "description": "The database or the broker is unreachable."}},
)
def read_health(request: Request, response: Response, settings: SettingsDep) -> HealthPublic:
    """Whether the database (and the broker, in the distributed mode) answer: 200 or 503."""
    database = _timed("database", lambda: _ping_database(request.app.state.engine))
    broker_url = settings.broker_url
    broker = None if broker_url is None else _timed("broker", lambda: _ping_broker(broker_url))
    healthy = database.ok and (broker is None or broker.ok)
    if not healthy:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return HealthPublic(
        status="ok" if healthy else "unavailable",
        mode="embedded" if settings.embedded else "distributed",
        database=database,
        broker=broker,
    )
