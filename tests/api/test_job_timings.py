"""``GET /jobs/{id}/timings``: a job's time to verdict through the API (its owner's, or an admin's)."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from store import Job, claim_job, get_job, record_attempt, session_scope
from tests.support.api import CANDIDATE_SOURCE, Key, Keys, job_body, verdict_dict
from vocabulary.builds import CompileResult
from vocabulary.stages import StageSeconds
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict


def _attempts(factory: sessionmaker[Session], job_id: int) -> None:
    """Claimed 2 s after its creation; a compile error, then two timed passes (1 ms and 8 ms against
    eager's 4 ms) whose lanes took 3 and 5 s."""
    passing = Verdict.from_dict(verdict_dict(Status.PASS, median_ms=1.0))
    verdicts = [
        Verdict(status=Status.ERROR, stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE, message="compile failed",
                compile=CompileResult(ok=False, seconds=9.0), stage_seconds=StageSeconds(compile=9.0)),
        passing.with_changes(stage_seconds=StageSeconds(compile=11.0, load=0.5, correctness=1.5, timing=1.0)),
        Verdict.from_dict(verdict_dict(Status.PASS, median_ms=8.0)).with_changes(
            stage_seconds=StageSeconds(reference_start=1.0, baselines=1.0, load=0.5, correctness=1.5, timing=1.0)),
    ]
    with session_scope(factory) as session:
        claim_job(session=session, job_id=job_id, worker_id="w1", lease_seconds=60)
        created = get_job(session=session, job_id=job_id).created_at
        session.execute(update(Job).where(Job.id == job_id).values(started_at=created + timedelta(seconds=2)))
        for i, verdict in enumerate(verdicts):
            record_attempt(session=session, job_id=job_id, trajectory_id=None, tool="benchmark",
                           source=f"{CANDIDATE_SOURCE}\n# {i}\n", parent_id=None, verdict=verdict)


def test_a_jobs_timings_per_attempt_stage_and_kind(client: TestClient, alice: Key,
                                                    factory: sessionmaker[Session]) -> None:
    job_id = client.post("/jobs", json=job_body(), headers=alice.headers).json()["id"]
    queued = client.get(f"/jobs/{job_id}/timings", headers=alice.headers).json()
    assert queued == {"job_id": job_id, "queue_wait_s": None, "attempts": [], "stages": [], "kinds": [],
                      "lane_s": 0.0, "verdicts_per_lane_hour": None}
    _attempts(factory, job_id)
    body = client.get(f"/jobs/{job_id}/timings", headers=alice.headers).json()
    assert body["queue_wait_s"] == 2.0
    assert [(a["n"], a["kind"], a["lane_s"]) for a in body["attempts"]] == [
        (1, "compile_error", 0.0), (2, "fast", 3.0), (3, "correct", 5.0)]
    assert body["attempts"][1]["stage_seconds"] == {"compile": 11.0, "load": 0.5, "correctness": 1.5, "timing": 1.0}
    stages = {s["stage"]: s for s in body["stages"]}
    assert list(stages) == ["queue_wait", "reference_start", "baselines", "compile", "load", "correctness", "timing"]
    assert stages["queue_wait"] == {"stage": "queue_wait", "n": 1, "p50_s": 2.0, "p95_s": 2.0, "total_s": 2.0}
    assert (stages["compile"]["n"], stages["compile"]["p50_s"], stages["compile"]["p95_s"]) == (2, 10.0, 10.9)
    assert [k["kind"] for k in body["kinds"]] == ["compile_error", "correct", "fast", "all"]
    assert body["kinds"][-1] == {"kind": "all", "attempts": 3, "lane_s": 8.0, "p50_lane_s": 3.0, "p95_lane_s": 4.8}
    # Three verdicts in 8 s of lane time.
    assert body["lane_s"] == 8.0 and body["verdicts_per_lane_hour"] == 1350.0


def test_only_the_owner_or_an_admin_reads_a_jobs_timings(client: TestClient, alice: Key, keys: Keys,
                                                          factory: sessionmaker[Session]) -> None:
    job_id = client.post("/jobs", json=job_body(), headers=alice.headers).json()["id"]
    _attempts(factory, job_id)
    bob = keys.create("bob")
    refused = client.get(f"/jobs/{job_id}/timings", headers=bob.headers)
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    assert client.get(f"/jobs/{job_id}/timings").status_code == 401
    admin = keys.create("root", is_admin=True)
    assert client.get(f"/jobs/{job_id}/timings", headers=admin.headers).json()["lane_s"] == 8.0
    assert client.get(f"/jobs/{job_id + 99}/timings", headers=alice.headers).status_code == 404
