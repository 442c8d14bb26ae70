"""One log format for every process of the service: uvicorn's (its server and access lines), the
API's and the workers' loggers all write ``2026-12-02 01:22:32 INFO api.app: …`` to stderr."""

from __future__ import annotations

from typing import Any

__all__ = ["LOG_FORMAT", "uvicorn_log_config"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def uvicorn_log_config(*, access_log: bool, level: str = "INFO") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn that formats its lines, the access log's (when
    on) and every other logger's (the app's, through the root logger) with `LOG_FORMAT`."""
    handler = {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": LOG_FORMAT}},
        "handlers": {"stderr": handler},
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.error": {"level": level},
            # Off: the access log is silenced at its logger, whatever uvicorn's access_log says.
            "uvicorn.access": {"handlers": [], "level": level if access_log else "WARNING", "propagate": True},
        },
    }
