"""Attempts, the best attempt (JSON and ``.py``) and messages, read back through the API."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from store import append_message, create_trajectory, record_attempt, session_scope
from tests.support.api import CANDIDATE_SOURCE, Key, job_body, verdict_dict
from vocabulary.verdict import Status, Verdict


def _job_with_attempts(client: TestClient, key: Key, factory: sessionmaker[Session]) -> int:
    job_id = client.post("/jobs", json=job_body(), headers=key.headers).json()["id"]
    with session_scope(factory) as session:
        trajectory = create_trajectory(session=session, job_id=job_id, index=0, temperature=0.7)
        for i, (status, median_ms) in enumerate(
            [(Status.FAIL, None), (Status.PASS, 2.0), (Status.PASS, 1.0), (Status.ERROR, None)]
        ):
            record_attempt(
                session=session,
                job_id=job_id,
                trajectory_id=trajectory.id,
                tool="benchmark",
                source=f"{CANDIDATE_SOURCE}\n# version {i}\n",
                parent_id=None,
                verdict=Verdict.from_dict(verdict_dict(status, median_ms=median_ms, correct=status is Status.PASS)),
            )
    return job_id


def test_attempts_are_paged_in_order(client: TestClient, alice: Key, factory: sessionmaker[Session]) -> None:
    job_id = _job_with_attempts(client, alice, factory)
    first = client.get(f"/jobs/{job_id}/attempts?limit=3", headers=alice.headers).json()
    assert [a["n"] for a in first["items"]] == [1, 2, 3]
    assert [a["status"] for a in first["items"]] == ["fail", "pass", "pass", ][:3]
    assert first["next_cursor"] == 3 and "source" not in first["items"][0]
    rest = client.get(f"/jobs/{job_id}/attempts?after=3", headers=alice.headers).json()
    assert [a["n"] for a in rest["items"]] == [4] and rest["next_cursor"] is None
    assert first["items"][2]["median_ms"] == 1.0 and first["items"][2]["speedup_vs_eager"] == 4.0


def test_one_attempt_has_its_source_and_whole_verdict(
    client: TestClient, alice: Key, factory: sessionmaker[Session]
) -> None:
    job_id = _job_with_attempts(client, alice, factory)
    attempt = client.get(f"/jobs/{job_id}/attempts/2", headers=alice.headers).json()
    assert attempt["n"] == 2 and attempt["source"].endswith("# version 1\n")
    assert attempt["verdict"] == verdict_dict(Status.PASS, median_ms=2.0)
    response = client.get(f"/jobs/{job_id}/attempts/9", headers=alice.headers)
    assert response.status_code == 404 and response.json()["code"] == "not_found"


def test_best_attempt_json_and_download(client: TestClient, alice: Key, factory: sessionmaker[Session]) -> None:
    job_id = _job_with_attempts(client, alice, factory)
    best = client.get(f"/jobs/{job_id}/best", headers=alice.headers).json()
    assert best["attempt"]["n"] == 3 and best["attempt"]["median_ms"] == 1.0
    assert best["attempt"]["verdict"]["status"] == "pass" and best["download"] == f"/jobs/{job_id}/best.py"
    job = client.get(f"/jobs/{job_id}", headers=alice.headers).json()
    assert job["best"]["n"] == 3 and job["attempts_count"] == 4

    download = client.get(f"/jobs/{job_id}/best.py", headers=alice.headers)
    assert download.status_code == 200
    assert download.headers["content-type"].startswith("text/x-python")
    assert download.headers["content-disposition"] == f'attachment; filename="job{job_id}_best.py"'
    assert download.text == best["attempt"]["source"]


def test_no_best_attempt_yet_is_404_with_a_reason(client: TestClient, alice: Key) -> None:
    job_id = client.post("/jobs", json=job_body(), headers=alice.headers).json()["id"]
    for path in (f"/jobs/{job_id}/best", f"/jobs/{job_id}/best.py"):
        response = client.get(path, headers=alice.headers)
        assert response.status_code == 404
        assert response.json()["code"] == "no_best_attempt"
        assert "no verified attempt yet (0 attempts, state queued)" in response.json()["detail"]


def test_messages_are_paged_and_filtered_by_trajectory(
    client: TestClient, alice: Key, factory: sessionmaker[Session]
) -> None:
    job_id = client.post("/jobs", json=job_body(trajectories=2), headers=alice.headers).json()["id"]
    with session_scope(factory) as session:
        for index in (0, 1):
            trajectory = create_trajectory(session=session, job_id=job_id, index=index)
            append_message(session=session, trajectory_id=trajectory.id, role="system", content=f"t{index} system")
            append_message(
                session=session,
                trajectory_id=trajectory.id,
                role="assistant",
                content=None,
                tool_calls=[{"id": "c1", "type": "function", "function": {"name": "compile", "arguments": "{}"}}],
                tokens_in=100,
                tokens_out=20,
                latency_ms=12.5,
                tokens_reasoning=7,
                tokens_cached=64,
            )
    page = client.get(f"/jobs/{job_id}/messages?limit=3", headers=alice.headers).json()
    assert [m["content"] for m in page["items"]] == ["t0 system", None, "t1 system"]
    rest = client.get(f"/jobs/{job_id}/messages?after={page['next_cursor']}", headers=alice.headers).json()
    assert [m["role"] for m in rest["items"]] == ["assistant"] and rest["next_cursor"] is None
    assert rest["items"][0]["tool_calls"][0]["function"]["name"] == "compile"
    # reasoning and cached-prompt tokens apart (null where not reported), and in the job's totals
    assert (page["items"][1]["tokens_reasoning"], page["items"][1]["tokens_cached"]) == (7, 64)
    assert (page["items"][0]["tokens_reasoning"], page["items"][0]["tokens_cached"]) == (None, None)
    only_1 = client.get(f"/jobs/{job_id}/messages?trajectory=1", headers=alice.headers).json()
    assert [m["seq"] for m in only_1["items"]] == [1, 2]
    job = client.get(f"/jobs/{job_id}", headers=alice.headers).json()
    assert (job["tokens_in"], job["tokens_reasoning"], job["tokens_cached"]) == (200, 14, 128)
