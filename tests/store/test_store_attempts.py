"""Attempts: columns filled from real verdicts, numbering, best-attempt choice, dedup, trajectories."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store import (
    Attempt,
    NotFound,
    TrajectoryState,
    append_message,
    create_trajectory,
    events_after,
    find_attempt_by_source,
    get_attempt,
    get_job,
    list_attempts,
    list_messages,
    list_trajectories,
    record_attempt,
    set_trajectory_state,
    source_sha256,
)
from vocabulary.events import EventType
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict


def _record(
    session: Session, job_id: int, verdict: Verdict, *, source: str = "src", **kwargs: Any
) -> Attempt:
    return record_attempt(
        session=session,
        job_id=job_id,
        trajectory_id=kwargs.pop("trajectory_id", None),
        tool=kwargs.pop("tool", "benchmark"),
        source=source,
        parent_id=kwargs.pop("parent_id", None),
        verdict=verdict,
    )


def test_columns_come_from_the_verdict(factory: sessionmaker[Session], build: Any, session: Session) -> None:
    job = build.job()
    verdict = build.verdict(median_ms=0.5, eager_ms=2.0, compile_ms=1.0)
    attempt = _record(session, job.id, verdict, source="class ModelNew: ...")
    session.commit()

    with factory() as fresh:
        stored = fresh.get(Attempt, attempt.id)
        assert stored is not None
        assert stored.n == 1
        assert stored.status is Status.PASS and stored.stage == "done" and stored.error_kind is None
        assert stored.correct is True
        assert stored.median_ms == pytest.approx(0.5)
        assert stored.speedup_vs_eager == pytest.approx(verdict.speedup_vs_eager)
        assert stored.speedup_vs_compile == pytest.approx(verdict.speedup_vs_compile)
        assert stored.pct_of_sol == pytest.approx(verdict.pct_of_sol)
        assert stored.compile_s == pytest.approx(3.5)
        assert stored.sha256 == source_sha256("class ModelNew: ...")
        assert stored.created_at.tzinfo is not None
        # The whole verdict survives the JSON column.
        assert Verdict.from_dict(stored.verdict) == verdict


def test_failed_verdicts_fill_what_they_have(session: Session, build: Any) -> None:
    job = build.job()
    verdict = build.verdict(
        Status.ERROR, median_ms=None, correct=False, stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE
    )
    attempt = _record(session, job.id, verdict)
    assert attempt.status is Status.ERROR and attempt.stage == "compile"
    assert attempt.error_kind is ErrorKind.CANDIDATE
    assert attempt.correct is False
    assert attempt.median_ms is None and attempt.speedup_vs_eager is None and attempt.pct_of_sol is None


def test_a_timed_pass_short_of_a_benchmark_never_becomes_best(session: Session, build: Any) -> None:
    """`Verdict.is_verified` decides: a profile that carries a time is still no verified kernel."""
    job = build.job()
    profiled = dataclasses.replace(build.verdict(median_ms=0.5), depth="profile")
    assert not profiled.is_verified
    _record(session, job.id, profiled, tool="profile")
    assert get_job(session=session, job_id=job.id).best_attempt_id is None
    timed = _record(session, job.id, build.verdict(median_ms=2.0), source="b")
    assert get_job(session=session, job_id=job.id).best_attempt_id == timed.id


def test_best_attempt_is_the_fastest_pass(session: Session, build: Any) -> None:
    job = build.job()

    def best() -> int | None:
        return get_job(session=session, job_id=job.id).best_attempt_id

    failed = _record(session, job.id, build.verdict(Status.FAIL, correct=False, median_ms=0.1))
    assert best() is None and failed.n == 1
    _record(session, job.id, build.verdict(median_ms=None), tool="check_correctness")
    assert best() is None  # correct but untimed: not a verified kernel yet
    slow = _record(session, job.id, build.verdict(median_ms=2.0))
    assert best() == slow.id
    fast = _record(session, job.id, build.verdict(median_ms=1.0))
    assert best() == fast.id
    _record(session, job.id, build.verdict(median_ms=1.5))
    _record(session, job.id, build.verdict(median_ms=1.0))  # a tie keeps the earlier
    _record(session, job.id, build.verdict(median_ms=None))
    _record(session, job.id, build.verdict(Status.SUSPICIOUS, median_ms=0.01))
    _record(session, job.id, build.verdict(Status.ERROR, median_ms=0.01, error_kind=ErrorKind.INFRA))
    assert best() == fast.id

    events = events_after(session=session, job_id=job.id, limit=100)
    events = [e for e in events if e.type == EventType.ATTEMPT]
    assert [e.payload["n"] for e in events] == list(range(1, 10))
    assert [e.payload["best"] for e in events] == [False, False, True, True, False, False, False, False, False]
    assert events[7].payload["status"] == "suspicious"


def test_numbering_paging_and_lookup(session: Session, build: Any) -> None:
    job, other = build.job(), build.job()
    first = _record(session, job.id, build.verdict(), source="a")
    second = _record(session, job.id, build.verdict(), source="b", parent_id=first.id)
    _record(session, other.id, build.verdict(), source="a")
    third = _record(session, job.id, build.verdict(), source="c")
    assert [first.n, second.n, third.n] == [1, 2, 3]
    assert second.parent_id == first.id
    assert get_job(session=session, job_id=job.id).attempts_count == 3

    assert get_attempt(session=session, job_id=job.id, n=2).id == second.id
    with pytest.raises(NotFound):
        get_attempt(session=session, job_id=job.id, n=4)

    page = list_attempts(session=session, job_id=job.id, limit=2)
    assert [a.n for a in page.items] == [1, 2] and page.next_cursor == 2
    page = list_attempts(session=session, job_id=job.id, after_n=page.next_cursor, limit=2)
    assert [a.n for a in page.items] == [3] and page.next_cursor is None

    with pytest.raises(ValueError, match="not one of job"):
        _record(session, other.id, build.verdict(), parent_id=first.id)


def test_find_attempt_by_source_for_dedup(session: Session, build: Any) -> None:
    job, other = build.job(), build.job()
    digest = source_sha256("same")
    assert find_attempt_by_source(session=session, job_id=job.id, sha256=digest) is None
    compiled = _record(session, job.id, build.verdict(), source="same", tool="compile")
    benchmarked = _record(session, job.id, build.verdict(), source="same", tool="benchmark")
    infra = _record(session, job.id, build.verdict(Status.ERROR, error_kind=ErrorKind.INFRA), source="same")

    newest = find_attempt_by_source(session=session, job_id=job.id, sha256=digest)
    assert newest is not None and newest.id == benchmarked.id
    found = find_attempt_by_source(session=session, job_id=job.id, sha256=digest, tool="compile")
    assert found is not None and found.id == compiled.id
    with_infra = find_attempt_by_source(
        session=session, job_id=job.id, sha256=digest, include_infra_errors=True
    )
    assert with_infra is not None and with_infra.id == infra.id
    assert find_attempt_by_source(session=session, job_id=other.id, sha256=digest) is None


def test_trajectories_count_turns_and_keep_their_best(session: Session, build: Any) -> None:
    job = build.job(trajectories_count=2)
    one = create_trajectory(session=session, job_id=job.id, index=0, temperature=0.2)
    two = create_trajectory(session=session, job_id=job.id, index=1, temperature=0.8, strategy_hint="tile")
    set_trajectory_state(session=session, trajectory_id=one.id, state=TrajectoryState.RUNNING)

    append_message(session=session, trajectory_id=one.id, role="system", content="rules")
    append_message(session=session, trajectory_id=one.id, role="user", content="problem")
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "benchmark", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "get_gpu_specs", "arguments": "{}"}},
    ]
    append_message(
        session=session,
        trajectory_id=one.id,
        role="assistant",
        content=None,
        tool_calls=calls,
        tokens_in=1000,
        tokens_out=200,
        latency_ms=850.0,
        cost_usd=0.01,
    )
    append_message(session=session, trajectory_id=one.id, role="tool", content="{...}", tool_call_id="c1")
    append_message(
        session=session,
        trajectory_id=two.id,
        role="assistant",
        content="thinking",
        tokens_in=500,
        tokens_out=50,
        cost_usd=0.005,
    )

    a1 = _record(session, job.id, build.verdict(median_ms=2.0), trajectory_id=one.id)
    a2 = _record(session, job.id, build.verdict(median_ms=1.0), trajectory_id=two.id)
    _record(session, job.id, build.verdict(median_ms=3.0), trajectory_id=one.id)
    set_trajectory_state(session=session, trajectory_id=one.id, state=TrajectoryState.SUBMITTED)
    session.commit()

    one, two = list_trajectories(session=session, job_id=job.id)
    assert (one.turns, one.tool_calls, one.messages_count) == (1, 2, 4)
    assert (two.turns, two.tool_calls, two.messages_count) == (1, 0, 1)
    assert one.best_attempt_id == a1.id and two.best_attempt_id == a2.id
    assert one.state is TrajectoryState.SUBMITTED and one.started_at and one.finished_at
    job = get_job(session=session, job_id=job.id)
    assert job.best_attempt_id == a2.id
    assert (job.tokens_in, job.tokens_out) == (1500, 250)
    assert job.cost_usd == pytest.approx(0.015)

    page = list_messages(session=session, job_id=job.id, limit=3)
    assert [m.role for m in page.items] == ["system", "user", "assistant"]
    assert page.items[2].tool_calls == calls and page.items[2].latency_ms == 850.0
    assert page.next_cursor is not None
    rest = list_messages(session=session, job_id=job.id, after_id=page.next_cursor)
    assert [(m.role, m.seq) for m in rest.items] == [("tool", 4), ("assistant", 1)]
    only_two = list_messages(session=session, job_id=job.id, trajectory_index=1)
    assert [m.content for m in only_two.items] == ["thinking"]

    with pytest.raises(ValueError, match="not one of job"):
        _record(session, build.job().id, build.verdict(), trajectory_id=one.id)
