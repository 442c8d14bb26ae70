"""`StoreRecorder` round trip on SQLite and PostgreSQL: what the agent records lands in the store."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker

from agent import StopReason
from store import (
    JobState,
    LeaseLost,
    TrajectoryState,
    cancel_job,
    claim_job,
    events_after,
    get_job,
    list_attempts,
    list_messages,
    list_trajectories,
    reap_expired_leases,
    session_scope,
    source_sha256,
    utcnow,
)
from tests.support.worker import SEED1_CPU, SEED1_CPU_WRONG, agent_job
from vocabulary.builds import CompileResult
from vocabulary.timing import Timing
from vocabulary.verdict import ErrorKind, Stage, Status, Trial, Verdict
from worker.lease import LeaseKeeper
from worker.recorder import StoreRecorder, trajectory_state_for

LEASE = 30.0


def _verdict(status: Status = Status.PASS, *, median_ms: float | None = 2.0, infra: bool = False) -> Verdict:
    return Verdict(
        status=Status.ERROR if infra else status,
        stage=Stage.PROBLEM if infra else Stage.DONE,
        error_kind=ErrorKind.INFRA if infra else None,
        compile=CompileResult(ok=True, seconds=1.5),
        trials=(Trial(seed_index=0, passed=status is Status.PASS, max_abs_err=1e-6, mean_abs_err=1e-7,
                      mismatch_frac=0.0),),
        timing=Timing.from_samples([median_ms] * 5, clock="perf_counter") if median_ms else None,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def factory(request: pytest.FixtureRequest) -> sessionmaker[Session]:
    return request.getfixturevalue(f"{request.param}_factory")


def _claimed(factory: sessionmaker[Session], worker: str = "w1") -> int:
    with session_scope(factory) as session:
        job_id = agent_job(session, "n/a", trajectories=2)
    with session_scope(factory) as session:
        assert claim_job(session=session, job_id=job_id, worker_id=worker, lease_seconds=LEASE) is not None
    return job_id


def _recorder(factory: sessionmaker[Session], job_id: int, worker: str = "w1") -> tuple[StoreRecorder, LeaseKeeper]:
    keeper = LeaseKeeper(session_factory=factory, job_id=job_id, worker_id=worker, lease_seconds=LEASE, interval_s=1)
    return StoreRecorder(session_factory=factory, job_id=job_id, worker_id=worker, lease_seconds=LEASE,
                         lease=keeper), keeper


def test_round_trip(factory: sessionmaker[Session]) -> None:
    job_id = _claimed(factory)
    recorder, _ = _recorder(factory, job_id)

    recorder.trajectory_started(index=0, temperature=0.2, strategy="fuse")
    recorder.trajectory_started(index=1, temperature=0.8, strategy="tile")
    recorder.message(trajectory_index=0, role="system", content="the problem", tool_calls=None, tool_call_id=None,
                     tokens_in=0, tokens_out=0, latency_ms=0.0, cost_usd=0.0)
    calls = [{"id": "c1", "type": "function", "function": {"name": "benchmark", "arguments": "{}"}}]
    recorder.message(trajectory_index=0, role="assistant", content="x" * 1000, tool_calls=calls, tool_call_id=None,
                     tokens_in=120, tokens_out=80, latency_ms=900.0, cost_usd=0.02)
    recorder.message(trajectory_index=1, role="assistant", content="other", tool_calls=None, tool_call_id=None,
                     tokens_in=10, tokens_out=5, latency_ms=100.0, cost_usd=0.001)

    sha = source_sha256(SEED1_CPU)
    assert recorder.find_attempt(source_sha256=sha, tool="benchmark") is None
    recorder.attempt(trajectory_index=0, tool="benchmark", source=SEED1_CPU, parent_sha256=None,
                     verdict=_verdict(median_ms=2.0))
    recorder.attempt(trajectory_index=1, tool="check_correctness", source=SEED1_CPU_WRONG, parent_sha256=sha,
                     verdict=_verdict(Status.FAIL, median_ms=None))
    infra = _verdict(infra=True)
    recorder.attempt(trajectory_index=1, tool="benchmark", source=SEED1_CPU_WRONG, parent_sha256=sha, verdict=infra)

    found = recorder.find_attempt(source_sha256=sha, tool="benchmark")
    assert found is not None and found.status is Status.PASS and found.timing is not None
    assert found.timing.median_ms == 2.0
    assert recorder.find_attempt(source_sha256=sha, tool="compile") is None
    # An infra verdict is never served again.
    assert recorder.find_attempt(source_sha256=source_sha256(SEED1_CPU_WRONG), tool="benchmark") is None
    assert not recorder.cancelled()

    recorder.trajectory_finished(index=0, reason="submitted")
    recorder.trajectory_finished(index=1, reason="tool_calls")

    with session_scope(factory) as session:
        job = get_job(session=session, job_id=job_id)
        assert job.tokens_in == 130 and job.tokens_out == 85 and job.cost_usd == pytest.approx(0.021)
        assert job.attempts_count == 3
        trajectories = list_trajectories(session=session, job_id=job_id)
        assert [t.state for t in trajectories] == [TrajectoryState.SUBMITTED, TrajectoryState.EXHAUSTED]
        assert trajectories[0].turns == 1 and trajectories[0].tool_calls == 1 and trajectories[0].error is None
        assert trajectories[1].error == "tool_calls" and trajectories[0].temperature == 0.2
        attempts = list_attempts(session=session, job_id=job_id).items
        assert [a.tool for a in attempts] == ["benchmark", "check_correctness", "benchmark"]
        assert attempts[1].parent_id == attempts[0].id and attempts[2].parent_id == attempts[0].id
        assert attempts[0].trajectory_id == trajectories[0].id and attempts[1].trajectory_id == trajectories[1].id
        assert job.best_attempt_id == attempts[0].id
        assert attempts[2].error_kind is ErrorKind.INFRA
        messages = list_messages(session=session, job_id=job_id).items
        assert [m.role for m in messages] == ["system", "assistant", "assistant"]
        assert messages[1].tool_calls == calls
        events = events_after(session=session, job_id=job_id)
    types = [e.type for e in events]
    assert types == ["state", "state", "trajectory", "trajectory", "message", "message", "message",
                     "attempt", "attempt", "attempt", "trajectory", "trajectory"]
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    message = events[5].payload
    assert message["role"] == "assistant" and message["tool_calls"] == ["benchmark"]
    assert message["trajectory"] == 0 and len(message["preview"]) == 240 and message["tokens_out"] == 80
    assert events[2].payload == {"index": 0, "trajectory_id": trajectories[0].id, "state": "running",
                                 "temperature": 0.2, "strategy": "fuse"}
    assert events[-1].payload["state"] == "exhausted" and events[-1].payload["reason"] == "tool_calls"
    assert events[7].payload["best"] is True


def test_a_cancel_is_seen_and_a_lost_lease_stops_every_write(factory: sessionmaker[Session]) -> None:
    job_id = _claimed(factory)
    recorder, keeper = _recorder(factory, job_id)
    recorder.trajectory_started(index=0, temperature=0.0, strategy="")
    with session_scope(factory) as session:
        cancel_job(session=session, job_id=job_id)
    # The next write (a heartbeat in the same transaction) learns of the cancel.
    recorder.message(trajectory_index=0, role="assistant", content="a", tool_calls=None, tool_call_id=None,
                     tokens_in=1, tokens_out=1, latency_ms=1.0, cost_usd=0.0)
    assert recorder.cancelled() and keeper.cancel_requested

    # The lease runs out and the reaper takes the job back: this worker writes nothing more.
    with session_scope(factory) as session:
        (reaped,) = reap_expired_leases(session=session, max_requeues=1, now=utcnow() + timedelta(seconds=LEASE + 1))
        assert reaped.state is JobState.CANCELLED
    with pytest.raises(LeaseLost):
        recorder.message(trajectory_index=0, role="assistant", content="b", tool_calls=None, tool_call_id=None,
                         tokens_in=1, tokens_out=1, latency_ms=1.0, cost_usd=0.0)
    with pytest.raises(LeaseLost):
        recorder.attempt(trajectory_index=0, tool="compile", source=SEED1_CPU, parent_sha256=None, verdict=_verdict())
    assert keeper.lost and recorder.cancelled()
    with session_scope(factory) as session:
        assert len(list_messages(session=session, job_id=job_id).items) == 1
        assert list_attempts(session=session, job_id=job_id).items == []


def test_a_requeued_job_reuses_its_trajectory_rows(sqlite_factory: sessionmaker[Session]) -> None:
    job_id = _claimed(sqlite_factory, "w1")
    first, _ = _recorder(sqlite_factory, job_id, "w1")
    first.trajectory_started(index=0, temperature=0.5, strategy="s")
    first.message(trajectory_index=0, role="system", content="p", tool_calls=None, tool_call_id=None, tokens_in=0,
                  tokens_out=0, latency_ms=0.0, cost_usd=0.0)
    with session_scope(sqlite_factory) as session:
        reap_expired_leases(session=session, max_requeues=1, now=utcnow() + timedelta(seconds=LEASE + 1))
        assert claim_job(session=session, job_id=job_id, worker_id="w2", lease_seconds=LEASE) is not None
    second, _ = _recorder(sqlite_factory, job_id, "w2")
    second.trajectory_started(index=0, temperature=0.5, strategy="s")
    second.message(trajectory_index=0, role="system", content="p", tool_calls=None, tool_call_id=None, tokens_in=0,
                   tokens_out=0, latency_ms=0.0, cost_usd=0.0)
    with session_scope(sqlite_factory) as session:
        (trajectory,) = list_trajectories(session=session, job_id=job_id)
        assert trajectory.messages_count == 2 and trajectory.state is TrajectoryState.RUNNING


def test_messages_of_an_unstarted_trajectory_are_misuse(sqlite_factory: sessionmaker[Session]) -> None:
    recorder, _ = _recorder(sqlite_factory, _claimed(sqlite_factory))
    with pytest.raises(ValueError, match="never started"):
        recorder.message(trajectory_index=3, role="user", content="?", tool_calls=None, tool_call_id=None, tokens_in=0,
                         tokens_out=0, latency_ms=0.0, cost_usd=0.0)


@pytest.mark.parametrize(
    ("reason", "state"),
    [("submitted", "submitted"), ("cancelled", "cancelled"), ("turns", "exhausted"), ("tool_calls", "exhausted"),
     ("tokens", "exhausted"), ("cost", "exhausted"), ("wall_clock", "exhausted"), ("target_reached", "exhausted"),
     ("llm_error", "failed"), ("context_overflow", "failed"), ("infra_error", "failed"),
     ("internal_error", "failed"), ("failed", "failed"), ("exhausted", "exhausted")],
)
def test_trajectory_states_follow_the_agents_stop_reasons(reason: str, state: str) -> None:
    assert trajectory_state_for(reason).value == state


def test_the_mapping_matches_agent_stop_reason_outcome() -> None:
    for reason in StopReason:
        assert trajectory_state_for(reason.value).value == reason.outcome, reason


def test_a_rerun_of_a_source_is_attributed_to_its_own_earlier_attempt(sqlite_factory: sessionmaker[Session]) -> None:
    """Issue 24: the dashboard said "edited from attempt 4" of a source identical to attempt 5's.
    The agent loop with the seed's scripted LLM (it benchmarks the source it checked) writes
    through the worker's recorder: a re-run's parent is the earlier attempt of the same source."""
    from agent import run_job
    from agent.providers.scripted import ScriptedProvider
    from problems import load_problem
    from tests.support.agents import SEED1, fake_for, no_sleep, spec_for

    job_id = _claimed(sqlite_factory)
    recorder, _ = _recorder(sqlite_factory, job_id)
    scripted = ScriptedProvider.for_problem(SEED1, "cpu")
    run_job(spec_for(load_problem(SEED1)), evaluator=fake_for(scripted), recorder=recorder, provider=scripted,
            sleep=no_sleep)
    with session_scope(sqlite_factory) as session:
        attempts = list_attempts(session=session, job_id=job_id).items
        by_id = {a.id: a for a in attempts}
        reruns = [a for a in attempts if any(b.sha256 == a.sha256 and b.n < a.n for b in attempts)]
        assert reruns, [(a.n, a.tool) for a in attempts]
        for rerun in reruns:
            assert rerun.parent_id is not None
            parent = by_id[rerun.parent_id]
            assert parent.sha256 == rerun.sha256 and parent.n < rerun.n, (rerun.n, parent.n)
        # A first run still names the source it was edited from.
        firsts = [a for a in attempts if a not in reruns and a.parent_id is not None]
        assert firsts and all(by_id[a.parent_id].sha256 != a.sha256 for a in firsts)
