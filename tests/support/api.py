"""The API's tests' inputs and fakes: problem and candidate sources, a `RecordingDispatcher`, API
keys written into the store, settings, job bodies and verdicts, and the app served by uvicorn."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from api import StreamOptions
from config import Settings
from store import create_api_key, revoke_api_key, session_scope
from tests.support.databases import redis_db
from tests.support.store import PROBLEM_SOURCE as PROBLEM_SOURCE  # the API tests post the store's problem
from tests.support.store import Builders
from vocabulary.verdict import Status

CANDIDATE_SOURCE = """
import torch
from torch import nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""

#: Streams in tests poll fast and end soon, so a forgotten running job cannot hang a test.
TEST_STREAM_OPTIONS = StreamOptions(poll_interval_s=0.02, keepalive_s=15.0, max_duration_s=10.0, retry_ms=100)
#: A Redis database the API's tests point the broker at (db 15; the worker's tests use db 14).
REDIS_URL = f"redis://127.0.0.1:6379/{redis_db(15)}"


@dataclass
class RecordingDispatcher:
    """Remembers every announced job instead of queueing it."""

    calls: list[tuple[int, str]] = field(default_factory=list)

    def job_created(self, job_id: int, target: str) -> None:
        self.calls.append((job_id, target))


@dataclass(frozen=True)
class Key:
    id: int
    plaintext: str

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.plaintext}


class Keys:
    """Issues keys straight into the database (what `kernelloop keys create` does)."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self.factory = factory
        self._count = 0

    def create(self, name: str | None = None, **quotas: Any) -> Key:
        self._count += 1
        quotas.setdefault("max_concurrent_jobs", 50)
        quotas.setdefault("max_jobs_per_day", 500)
        with session_scope(self.factory) as session:
            issued = create_api_key(
                session=session, name=name or f"key{self._count}", owner=name or f"owner{self._count}", **quotas
            )
            return Key(id=issued.key.id, plaintext=issued.plaintext)

    def revoke(self, key: Key) -> None:
        with session_scope(self.factory) as session:
            revoke_api_key(session=session, api_key_id=key.id)


def make_settings(db_url: str, data_dir: Path, **overrides: Any) -> Settings:
    # _env_file=None: a developer's .env must not leak into the tests.
    return Settings(_env_file=None, database_url=db_url, data_dir=data_dir, **overrides)  # type: ignore[call-arg]


def verdict_dict(
    status: Status = Status.PASS, *, median_ms: float | None = 1.0, correct: bool = True
) -> dict[str, Any]:
    """A real ``Verdict.to_dict()``."""
    return Builders.verdict(status, median_ms=median_ms, correct=correct).to_dict()


def job_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"problem_id": "level1/softmax", "target": "cpu"}
    body.update(changes)
    return body


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run ``app`` under uvicorn in a thread on a free port of 127.0.0.1; yields the base URL."""
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP; without it
    # every keep-alive request waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    # A stream a test left open must not hold the shutdown for long.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    assert httpx.get(f"{base}/health").status_code == 200
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
