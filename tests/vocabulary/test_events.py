"""The job events' typed payloads (`vocabulary.events`): the JSON they write and reading it back."""

from __future__ import annotations

import json

import pytest

from vocabulary.events import (
    EVENT_PAYLOADS,
    AttemptPayload,
    CancelRequestedPayload,
    EventType,
    MessagePayload,
    ProgressPayload,
    StagePayload,
    StatePayload,
    TrajectoryPayload,
    parse_payload,
)
from vocabulary.figures import AttemptFigures
from vocabulary.stages import StageName, StagePhase
from vocabulary.verdict import ErrorKind, Stage, Status

FIGURES = AttemptFigures(status=Status.PASS, stage=Stage.DONE, correct=True, median_ms=1.5, speedup_vs_eager=2.0,
                         compile_s=0.0)
PAYLOADS = {
    EventType.STATE: StatePayload(state="running", previous="queued", worker_id="w"),
    EventType.CANCEL_REQUESTED: CancelRequestedPayload(),
    EventType.ATTEMPT: AttemptPayload(**vars(FIGURES), n=1, attempt_id=7, trajectory_id=None, tool="benchmark",
                                      best=True, eager_ms=3.0),
    EventType.TRAJECTORY: TrajectoryPayload(index=0, trajectory_id=3, state="running", temperature=0.2,
                                            strategy="fuse"),
    EventType.MESSAGE: MessagePayload(trajectory=0, trajectory_id=3, message_id=9, seq=2, role="assistant",
                                      tool_calls=["compile"], tool_call_id=None, tokens_in=10, tokens_out=5,
                                      tokens_reasoning=None, tokens_cached=None, latency_ms=12.0, cost_usd=0.01,
                                      preview="hi"),
    EventType.PROGRESS: ProgressPayload(phase="infra_retry", details={"tries": 1, "stage": "correctness"}),
    EventType.STAGE: StagePayload(StageName.COMPILE, StagePhase.FINISHED, 1.25, at="2026-12-05T07:00:00+00:00"),
}


def test_every_event_type_but_the_streams_end_has_its_payload() -> None:
    assert set(EVENT_PAYLOADS) == set(EventType) - {EventType.END} == set(PAYLOADS)


@pytest.mark.parametrize("event_type", list(PAYLOADS))
def test_each_payload_round_trips_through_its_json(event_type: EventType) -> None:
    payload = PAYLOADS[event_type]
    assert isinstance(payload, EVENT_PAYLOADS[event_type])
    assert parse_payload(event_type.value, json.loads(json.dumps(payload.to_dict()))) == payload


def test_the_json_keeps_the_stream_s_shapes() -> None:
    assert StatePayload(state="queued").to_dict() == {"state": "queued"}
    assert CancelRequestedPayload().to_dict() == {}
    start = TrajectoryPayload(index=0, trajectory_id=3, state="running").to_dict()
    assert start == {"index": 0, "trajectory_id": 3, "state": "running", "temperature": None, "strategy": None}
    end = TrajectoryPayload(index=0, trajectory_id=3, state="failed", reason="llm_error").to_dict()
    assert end == {"index": 0, "trajectory_id": 3, "state": "failed", "reason": "llm_error"}
    assert ProgressPayload(phase="retime", details={"source_sha256": "ab"}).to_dict() == {
        "phase": "retime", "source_sha256": "ab"}
    # An attempt's figures are flat in its event, beside where it belongs and its baselines.
    assert PAYLOADS[EventType.ATTEMPT].to_dict() == {
        "n": 1, "attempt_id": 7, "trajectory_id": None, "tool": "benchmark", "status": "pass", "stage": "done",
        "error_kind": None, "correct": True, "median_ms": 1.5, "speedup_vs_eager": 2.0, "speedup_vs_compile": None,
        "pct_of_sol": None, "compile_s": 0.0, "best": True, "eager_ms": 3.0, "compile_ms": None}
    assert PAYLOADS[EventType.STAGE].to_dict() == {"stage": "compile", "phase": "finished", "seconds": 1.25,
                                                   "at": "2026-12-05T07:00:00+00:00"}


def test_an_attempt_event_reads_its_figures_as_enums() -> None:
    data = {**PAYLOADS[EventType.ATTEMPT].to_dict(), "status": "error", "error_kind": "candidate", "correct": False}
    attempt = parse_payload("attempt", data)
    assert isinstance(attempt, AttemptPayload)
    assert (attempt.status, attempt.error_kind) == (Status.ERROR, ErrorKind.CANDIDATE)
    assert parse_payload("attempt", {**data, "status": "great"}) is None  # not a status


def test_unknown_types_and_malformed_data_parse_to_none() -> None:
    assert parse_payload("end", {"state": "succeeded"}) is None
    assert parse_payload("a newer type", {"state": "succeeded"}) is None
    assert parse_payload("attempt", {"n": 1}) is None
    assert parse_payload("stage", {"stage": "compile"}) is None
    assert parse_payload("state", "not an object") is None
