"""``POST /evaluations``: one candidate, no LLM; checked statically before it is queued."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from store import JobKind, get_job, session_scope
from tests.support.api import CANDIDATE_SOURCE, PROBLEM_SOURCE, Key, RecordingDispatcher


def test_post_evaluation_creates_an_evaluation_job(
    client: TestClient, alice: Key, dispatcher: RecordingDispatcher, factory: sessionmaker[Session]
) -> None:
    body = {"problem_source": PROBLEM_SOURCE, "candidate_source": CANDIDATE_SOURCE, "target": "cpu"}
    response = client.post("/evaluations", json=body, headers=alice.headers)
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/jobs/{job['id']}"
    assert job["kind"] == "evaluation" and job["state"] == "queued" and job["llm_profile"] is None
    assert dispatcher.calls == [(job["id"], "cpu")]
    with session_scope(factory) as session:
        stored = get_job(session=session, job_id=job["id"])
        assert stored.kind is JobKind.EVALUATION and stored.candidate_source == CANDIDATE_SOURCE


@pytest.mark.parametrize(
    ("candidate", "code", "message"),
    [
        pytest.param(
            "class ModelNew(nn.Module:\n    pass\n", "invalid_candidate", "candidate_source: syntax error at line 1",
            id="syntax",
        ),
        pytest.param(
            "class Model(nn.Module):\n    pass\n", "invalid_candidate", "must define class ModelNew(nn.Module)",
            id="no-modelnew",
        ),
        pytest.param("def f():\n    class ModelNew: pass\n", "invalid_candidate", "at module level", id="nested"),
        pytest.param("class ModelNew: pass\n\x00", "invalid_candidate", "NUL character", id="nul"),
        pytest.param(
            "class ModelNew: pass\n# \ud800\n", "invalid_request", "candidate_source: Input should be a valid string",
            id="lone-surrogate",
        ),
    ],
)
def test_bad_candidates_are_422(
    client: TestClient, alice: Key, dispatcher: RecordingDispatcher, candidate: str, code: str, message: str
) -> None:
    body = {"problem_id": "level1/softmax", "candidate_source": candidate, "target": "cpu"}
    # ASCII-escaped JSON: a lone surrogate travels as "\ud800", as any client may send it.
    headers = {**alice.headers, "content-type": "application/json"}
    response = client.post("/evaluations", content=json.dumps(body, ensure_ascii=True), headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == code
    assert message in response.json()["detail"]
    assert dispatcher.calls == []


def test_candidate_is_required(client: TestClient, alice: Key) -> None:
    response = client.post("/evaluations", json={"problem_id": "level1/softmax"}, headers=alice.headers)
    assert response.status_code == 422
    assert response.json()["errors"] == [{"field": "candidate_source", "message": "Field required"}]


def test_evaluation_needs_a_key(client: TestClient) -> None:
    body = {"problem_id": "level1/softmax", "candidate_source": CANDIDATE_SOURCE}
    assert client.post("/evaluations", json=body).status_code == 401
