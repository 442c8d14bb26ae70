"""The job events' typed payloads: the JSON they write, and reading the store's own events back."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from store import (
    AttemptPayload,
    CancelRequestedPayload,
    MessagePayload,
    ProgressPayload,
    StatePayload,
    TrajectoryPayload,
    events_after,
    parse_payload,
    record_attempt,
)


def test_each_payload_round_trips_through_its_json() -> None:
    payloads = [
        StatePayload(state="running", previous="queued", worker_id="w"),
        CancelRequestedPayload(),
        AttemptPayload(n=1, attempt_id=7, trajectory_id=None, tool="benchmark", status="pass", stage="done",
                       correct=True, median_ms=1.5, speedup_vs_eager=2.0, speedup_vs_compile=None, pct_of_sol=None,
                       best=True),
        TrajectoryPayload(index=0, trajectory_id=3, state="running", temperature=0.2, strategy="fuse"),
        TrajectoryPayload(index=0, trajectory_id=3, state="exhausted", reason="turns"),
        MessagePayload(trajectory=0, trajectory_id=3, message_id=9, seq=2, role="assistant", tool_calls=["compile"],
                       tool_call_id=None, tokens_in=10, tokens_out=5, tokens_reasoning=None, tokens_cached=None,
                       latency_ms=12.0, cost_usd=0.01, preview="hi"),
        ProgressPayload(phase="infra_retry", details={"tries": 1, "stage": "correctness"}),
    ]
    types = ["state", "cancel_requested", "attempt", "trajectory", "trajectory", "message", "progress"]
    for event_type, payload in zip(types, payloads, strict=True):
        assert parse_payload(event_type, payload.to_dict()) == payload


def test_the_json_keeps_the_stream_s_shapes() -> None:
    assert StatePayload(state="queued").to_dict() == {"state": "queued"}
    assert CancelRequestedPayload().to_dict() == {}
    start = TrajectoryPayload(index=0, trajectory_id=3, state="running").to_dict()
    assert start == {"index": 0, "trajectory_id": 3, "state": "running", "temperature": None, "strategy": None}
    end = TrajectoryPayload(index=0, trajectory_id=3, state="failed", reason="llm_error").to_dict()
    assert end == {"index": 0, "trajectory_id": 3, "state": "failed", "reason": "llm_error"}
    assert ProgressPayload(phase="retime", details={"source_sha256": "ab"}).to_dict() == {
        "phase": "retime", "source_sha256": "ab"}


def test_unknown_types_and_malformed_data_parse_to_none() -> None:
    assert parse_payload("end", {"state": "succeeded"}) is None
    assert parse_payload("attempt", {"n": 1}) is None
    assert parse_payload("state", "not an object") is None


def test_the_store_s_own_events_read_back_typed(session: Session, build: Any) -> None:
    job = build.job()
    record_attempt(session=session, job_id=job.id, trajectory_id=None, tool="benchmark", source="s",
                   parent_id=None, verdict=build.verdict(median_ms=2.0))
    session.commit()
    parsed = [parse_payload(e.type, e.payload) for e in events_after(session=session, job_id=job.id)]
    assert parsed[0] == StatePayload(state="queued")
    attempt = parsed[-1]
    assert isinstance(attempt, AttemptPayload) and attempt.best and attempt.median_ms == 2.0
