"""`CeleryDispatcher` against the real Redis (db 15): the message a worker will receive."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api import RUN_JOB_TASK, create_app
from tests.support.api import CANDIDATE_SOURCE, REDIS_URL, Key, job_body, make_settings
from tests.support.network import free_port


@pytest.fixture
def redis_db() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


def queued_messages(client: redis.Redis, queue: str) -> list[dict]:
    # Kombu's Redis transport keeps a queue as a list of JSON envelopes; the body is base64 JSON.
    messages = []
    for raw in client.lrange(queue, 0, -1):
        envelope = json.loads(raw)
        body = json.loads(base64.b64decode(envelope["body"]))
        messages.append({"task": envelope["headers"]["task"], "args": body[0], "kwargs": body[1]})
    return messages


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_post_puts_run_job_on_the_targets_queue(
    db_url: str, tmp_path, redis_db: redis.Redis, alice: Key, factory: sessionmaker[Session]
) -> None:
    settings = make_settings(db_url, tmp_path, broker_url=REDIS_URL, gpu_type="h200")
    with TestClient(create_app(settings)) as client:  # the default dispatcher: Celery, from the settings
        cpu_job = client.post("/jobs", json=job_body(target="cpu"), headers=alice.headers).json()["id"]
        gpu_job = client.post(
            "/evaluations",
            json={**job_body(target="cuda"), "candidate_source": CANDIDATE_SOURCE},
            headers=alice.headers,
        ).json()["id"]
    assert queued_messages(redis_db, "cpu") == [{"task": RUN_JOB_TASK, "args": [cpu_job], "kwargs": {}}]
    assert queued_messages(redis_db, "gpu-h200") == [{"task": "kernelloop.run_job", "args": [gpu_job], "kwargs": {}}]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_unreachable_broker_is_503_and_the_job_is_cancelled(
    db_url: str, tmp_path, alice: Key, factory: sessionmaker[Session]
) -> None:
    settings = make_settings(db_url, tmp_path, broker_url=f"redis://127.0.0.1:{free_port()}/0")
    with TestClient(create_app(settings)) as client:
        response = client.post("/jobs", json=job_body(target="cpu"), headers=alice.headers)
        assert response.status_code == 503, response.text
        assert response.json()["code"] == "queue_unavailable"
        assert [j["state"] for j in client.get("/jobs", headers=alice.headers).json()["items"]] == ["cancelled"]
