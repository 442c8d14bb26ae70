"""Jobs on both backends: guarded moves, the atomic claim, leases and the reaper, deletion."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from store import (
    Attempt,
    CancelOutcome,
    IllegalTransition,
    Job,
    JobEvent,
    JobKind,
    JobState,
    LeaseLost,
    LeaseStatus,
    Message,
    NewJob,
    NotFound,
    StoredProblem,
    Target,
    Trajectory,
    append_message,
    cancel_job,
    claim_job,
    claim_next_job,
    create_api_key,
    create_job,
    create_jobs,
    create_trajectory,
    delete_job,
    events_after,
    finish_job,
    get_job,
    get_or_create_problem,
    heartbeat,
    list_jobs,
    reap_expired_leases,
    record_attempt,
    redispatch_stale_jobs,
    session_scope,
)
from tests.support.store import Builders
from vocabulary.verdict import Status

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
LEASE = 60.0


def _state_events(session: Session, job_id: int) -> list[str]:
    return [e.payload["state"] for e in events_after(session=session, job_id=job_id) if e.type == "state"]


def test_create_job_is_queued_with_an_event(session: Session, build: Any) -> None:
    job = build.job()
    session.commit()
    assert job.state is JobState.QUEUED
    assert job.kind is JobKind.AGENT
    assert job.budgets == {"turns": 10, "tool_calls": 30}
    assert job.created_at.tzinfo is not None
    assert _state_events(session, job.id) == ["queued"]


def test_create_job_refuses_unrunnable_jobs(session: Session, build: Any) -> None:
    problem = build.problem()
    with pytest.raises(ValueError, match="trajectory"):
        create_job(session=session, problem_id=problem.id, target=Target.CPU, trajectories_count=0)
    with pytest.raises(ValueError, match="candidate_source"):
        create_job(session=session, problem_id=problem.id, target=Target.CPU, kind=JobKind.EVALUATION)


def test_claim_runs_the_oldest_job_of_the_target(session: Session, build: Any) -> None:
    cuda = build.job(target=Target.CUDA)
    first, second = build.job(), build.job()
    session.commit()

    job = claim_next_job(session=session, worker_id="w1", target=Target.CPU, lease_seconds=LEASE, now=T0)
    session.commit()
    assert job is not None and job.id == first.id
    assert job.state is JobState.RUNNING
    assert job.worker_id == "w1"
    assert job.started_at == T0 and job.heartbeat_at == T0
    assert job.lease_expires_at == T0 + timedelta(seconds=LEASE)
    assert _state_events(session, job.id) == ["queued", "running"]

    again = claim_next_job(session=session, worker_id="w2", target=Target.CPU, lease_seconds=LEASE, now=T0)
    assert again is not None and again.id == second.id
    assert claim_next_job(session=session, worker_id="w3", target=Target.CPU, lease_seconds=LEASE) is None
    assert get_job(session=session, job_id=cuda.id).state is JobState.QUEUED


def test_claim_job_takes_that_job_only_while_queued(session: Session, build: Any) -> None:
    older, job, cuda = build.job(), build.job(), build.job(target=Target.CUDA)
    session.commit()

    claimed = claim_job(session=session, job_id=job.id, worker_id="w1", lease_seconds=LEASE, now=T0)
    session.commit()
    assert claimed is not None and claimed.id == job.id
    assert claimed.state is JobState.RUNNING and claimed.worker_id == "w1"
    assert claimed.started_at == T0 and claimed.lease_expires_at == T0 + timedelta(seconds=LEASE)
    assert _state_events(session, job.id) == ["queued", "running"]
    assert get_job(session=session, job_id=older.id).state is JobState.QUEUED

    # A second delivery of the same message finds it taken.
    assert claim_job(session=session, job_id=job.id, worker_id="w2", lease_seconds=LEASE) is None
    assert get_job(session=session, job_id=job.id).worker_id == "w1"
    # A job of another target, or one that does not exist, is not claimed.
    assert claim_job(session=session, job_id=cuda.id, worker_id="w2", lease_seconds=LEASE, target=Target.CPU) is None
    assert claim_job(session=session, job_id=cuda.id + 100, worker_id="w2", lease_seconds=LEASE) is None
    assert cancel_job(session=session, job_id=older.id) is CancelOutcome.CANCELLED
    assert claim_job(session=session, job_id=older.id, worker_id="w2", lease_seconds=LEASE) is None
    with pytest.raises(ValueError):
        claim_job(session=session, job_id=cuda.id, worker_id="w2", lease_seconds=0)


def test_claim_job_after_a_requeue_keeps_the_first_start(session: Session, build: Any) -> None:
    job = build.job()
    claim_job(session=session, job_id=job.id, worker_id="w1", lease_seconds=LEASE, now=T0)
    later = T0 + timedelta(seconds=LEASE + 1)
    (reaped,) = reap_expired_leases(session=session, max_requeues=2, now=later)
    assert reaped.state is JobState.QUEUED
    again = claim_job(session=session, job_id=job.id, worker_id="w2", lease_seconds=LEASE, now=later)
    assert again is not None and again.worker_id == "w2" and again.started_at == T0


def test_racing_deliveries_of_one_job_one_claims(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as session:
        job_id = create_job(session=session, problem_id=_problem_id(session), target=Target.CPU).id

    def claim(session: Session, worker: str) -> str | None:
        job = claim_job(session=session, job_id=job_id, worker_id=worker, lease_seconds=LEASE)
        return job.worker_id if job else None

    winners = [r for r in _race(factory, 3, claim) if r is not None]
    assert len(winners) == 1
    with session_scope(factory) as session:
        assert _state_events(session, job_id) == ["queued", "running"]


def _race(factory: sessionmaker[Session], workers: int, action: Callable[[Session, str], Any]) -> list[Any]:
    """Run ``action`` in ``workers`` threads released at once, each in its own unit of work."""
    barrier = threading.Barrier(workers)

    def run(index: int) -> Any:
        barrier.wait()
        with session_scope(factory) as session:
            return action(session, f"worker-{index}")

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run, range(workers)))


def test_two_workers_racing_for_one_job_one_wins(factory: sessionmaker[Session]) -> None:
    for _round in range(5):
        with session_scope(factory) as session:
            problem_id = _problem_id(session)
            job_id = create_job(session=session, problem_id=problem_id, target=Target.CPU).id

        def claim(session: Session, worker: str) -> str | None:
            job = claim_next_job(session=session, worker_id=worker, target=Target.CPU, lease_seconds=LEASE)
            return job.worker_id if job else None

        results = _race(factory, 2, claim)
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        with session_scope(factory) as session:
            job = get_job(session=session, job_id=job_id)
            assert job.state is JobState.RUNNING and job.worker_id == winners[0]
            assert _state_events(session, job_id) == ["queued", "running"]


def test_racing_workers_each_job_claimed_exactly_once(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as session:
        problem_id = _problem_id(session)
        ids = [create_job(session=session, problem_id=problem_id, target=Target.CPU).id for _ in range(6)]

    def drain(session: Session, worker: str) -> list[int]:
        taken = []
        while job := claim_next_job(session=session, worker_id=worker, target=Target.CPU, lease_seconds=60):
            taken.append(job.id)
            session.commit()
        return taken

    taken = [job_id for got in _race(factory, 3, drain) for job_id in got]
    assert sorted(taken) == ids


def _problem_id(session: Session) -> int:
    return get_or_create_problem(session=session, source="class Model: ...", declarations={}).id


def test_heartbeat_extends_the_lease_of_its_holder_only(session: Session, build: Any) -> None:
    job = build.job()
    claim_next_job(session=session, worker_id="w1", target=Target.CPU, lease_seconds=LEASE, now=T0)
    later = T0 + timedelta(seconds=30)
    assert heartbeat(session=session, job_id=job.id, worker_id="w1", lease_seconds=LEASE, now=later) is (
        LeaseStatus.HELD
    )
    assert get_job(session=session, job_id=job.id).lease_expires_at == later + timedelta(seconds=LEASE)
    assert heartbeat(session=session, job_id=job.id, worker_id="intruder", lease_seconds=LEASE) is (
        LeaseStatus.LOST
    )
    # The heartbeat moved the expiry: a reap at the old expiry finds nothing.
    assert reap_expired_leases(session=session, max_requeues=3, now=T0 + timedelta(seconds=LEASE + 1)) == []


def test_finish_job_moves_a_held_job_to_a_terminal_state(session: Session, build: Any) -> None:
    job = build.job()
    claim_next_job(session=session, worker_id="w1", target=Target.CPU, lease_seconds=LEASE, now=T0)
    with pytest.raises(IllegalTransition):
        finish_job(session=session, job_id=job.id, worker_id="w1", state=JobState.QUEUED)
    with pytest.raises(LeaseLost):
        finish_job(session=session, job_id=job.id, worker_id="w2", state=JobState.SUCCEEDED)
    done = finish_job(session=session, job_id=job.id, worker_id="w1", state=JobState.SUCCEEDED, now=T0)
    assert done.state is JobState.SUCCEEDED and done.finished_at == T0
    assert done.lease_expires_at is None
    # A finished job cannot be finished again.
    with pytest.raises(LeaseLost):
        finish_job(session=session, job_id=job.id, worker_id="w1", state=JobState.FAILED)
    assert _state_events(session, job.id) == ["queued", "running", "succeeded"]


def test_cancel_a_queued_job_at_once(session: Session, build: Any) -> None:
    job = build.job()
    assert cancel_job(session=session, job_id=job.id) is CancelOutcome.CANCELLED
    job = get_job(session=session, job_id=job.id)
    assert job.state is JobState.CANCELLED and job.error
    assert claim_next_job(session=session, worker_id="w", target=Target.CPU, lease_seconds=LEASE) is None
    assert cancel_job(session=session, job_id=job.id) is CancelOutcome.ALREADY_FINISHED
    with pytest.raises(NotFound):
        cancel_job(session=session, job_id=job.id + 1000)


def test_cancel_a_running_job_through_its_worker(session: Session, build: Any) -> None:
    job = build.job()
    claim_next_job(session=session, worker_id="w1", target=Target.CPU, lease_seconds=LEASE)
    assert cancel_job(session=session, job_id=job.id) is CancelOutcome.REQUESTED
    assert cancel_job(session=session, job_id=job.id) is CancelOutcome.REQUESTED  # no second event
    assert get_job(session=session, job_id=job.id).state is JobState.RUNNING
    status = heartbeat(session=session, job_id=job.id, worker_id="w1", lease_seconds=LEASE)
    assert status is LeaseStatus.CANCEL_REQUESTED
    finish_job(session=session, job_id=job.id, worker_id="w1", state=JobState.CANCELLED)
    types = [e.type for e in events_after(session=session, job_id=job.id)]
    assert types == ["state", "state", "cancel_requested", "state"]


def test_reaper_requeues_then_fails_keeping_attempts(session: Session, build: Any) -> None:
    job = build.job()
    claim_next_job(session=session, worker_id="w1", target=Target.CPU, lease_seconds=LEASE, now=T0)
    record_attempt(
        session=session,
        job_id=job.id,
        trajectory_id=None,
        tool="benchmark",
        source="v1",
        parent_id=None,
        verdict=build.verdict(),
    )
    session.commit()

    # Not expired yet.
    assert reap_expired_leases(session=session, max_requeues=1, now=T0 + timedelta(seconds=59)) == []
    # Expired: back to the queue, the old worker's lease gone.
    t1 = T0 + timedelta(seconds=61)
    [reaped] = reap_expired_leases(session=session, max_requeues=1, now=t1)
    assert (reaped.job_id, reaped.state, reaped.worker_id) == (job.id, JobState.QUEUED, "w1")
    session.commit()
    job = get_job(session=session, job_id=job.id)
    assert job.state is JobState.QUEUED and job.requeue_count == 1
    assert job.worker_id is None and job.lease_expires_at is None
    assert heartbeat(session=session, job_id=job.id, worker_id="w1", lease_seconds=LEASE) is LeaseStatus.LOST
    with pytest.raises(LeaseLost):
        finish_job(session=session, job_id=job.id, worker_id="w1", state=JobState.SUCCEEDED)

    # Claimed again, expired again: one re-queue was allowed, so now it fails with the reason.
    claimed = claim_next_job(session=session, worker_id="w2", target=Target.CPU, lease_seconds=LEASE, now=t1)
    assert claimed is not None and claimed.started_at == T0  # the first start is kept
    [reaped] = reap_expired_leases(session=session, max_requeues=1, now=t1 + timedelta(seconds=61))
    assert reaped.state is JobState.FAILED
    session.commit()
    job = get_job(session=session, job_id=job.id)
    assert job.state is JobState.FAILED
    assert job.error is not None and "lease expired 2 times" in job.error and "'w2'" in job.error
    assert job.finished_at == t1 + timedelta(seconds=61)
    assert session.scalar(select(func.count()).select_from(Attempt).where(Attempt.job_id == job.id)) == 1
    assert job.best_attempt_id is not None
    assert _state_events(session, job.id) == ["queued", "running", "queued", "running", "failed"]


def test_reaper_ends_a_job_whose_cancel_was_never_acted_on(session: Session, build: Any) -> None:
    job = build.job()
    claim_next_job(session=session, worker_id="w1", target=Target.CPU, lease_seconds=LEASE, now=T0)
    cancel_job(session=session, job_id=job.id)
    [reaped] = reap_expired_leases(session=session, max_requeues=5, now=T0 + timedelta(hours=1))
    assert reaped.state is JobState.CANCELLED
    assert get_job(session=session, job_id=job.id).state is JobState.CANCELLED


def test_redispatch_picks_queued_jobs_nobody_took_once_per_period(session: Session, build: Any) -> None:
    def at(seconds: float) -> datetime:
        return T0 + timedelta(seconds=seconds)

    def picked(seconds: float) -> list[tuple[int, Target]]:
        return redispatch_stale_jobs(session=session, older_than_s=300, now=at(seconds))

    lost = build.job(now=T0)
    cuda = build.job(target=Target.CUDA, now=at(1))
    young = build.job(now=at(250))
    claimed = build.job(now=T0)
    claim_job(session=session, job_id=claimed.id, worker_id="w", lease_seconds=LEASE, now=at(10))
    cancel_job(session=session, job_id=build.job(now=T0).id)
    session.commit()

    assert picked(299) == []
    assert picked(310) == [(lost.id, Target.CPU), (cuda.id, Target.CUDA)]
    session.commit()
    assert get_job(session=session, job_id=lost.id).dispatched_at == at(310)
    assert picked(320) == []  # stamped: not again before another 300 s
    assert picked(560) == [(young.id, Target.CPU)]
    assert picked(620) == [(lost.id, Target.CPU), (cuda.id, Target.CUDA)]
    with pytest.raises(ValueError):
        redispatch_stale_jobs(session=session, older_than_s=0)


def test_a_requeued_job_counts_as_dispatched_when_it_is_requeued(session: Session, build: Any) -> None:
    job = build.job(now=T0)
    claim_job(session=session, job_id=job.id, worker_id="w", lease_seconds=LEASE, now=T0)
    t1 = T0 + timedelta(hours=1)
    [reaped] = reap_expired_leases(session=session, max_requeues=1, now=t1)
    assert reaped.state is JobState.QUEUED  # the reaper sends its message itself
    assert redispatch_stale_jobs(session=session, older_than_s=300, now=t1 + timedelta(seconds=10)) == []
    later = t1 + timedelta(seconds=301)
    assert redispatch_stale_jobs(session=session, older_than_s=300, now=later) == [(job.id, Target.CPU)]


def test_concurrent_reapers_redispatch_each_job_once(factory: sessionmaker[Session]) -> None:
    with session_scope(factory) as session:
        builders = Builders(session)
        ids = sorted(builders.job(now=T0).id for _ in range(20))
    barrier = threading.Barrier(4)

    def reaper() -> list[int]:
        barrier.wait(timeout=30)
        with session_scope(factory) as session:
            return [job_id for job_id, _ in redispatch_stale_jobs(session=session, older_than_s=60)]

    with ThreadPoolExecutor(4) as pool:
        results = [f.result(timeout=60) for f in [pool.submit(reaper) for _ in range(4)]]
    assert sorted(job_id for result in results for job_id in result) == ids


def test_list_jobs_pages_by_owner(session: Session, build: Any) -> None:
    alice = create_api_key(session=session, name="a", owner="alice").key
    bob = create_api_key(session=session, name="b", owner="bob").key
    mine = [build.job(owner_id=alice.id).id for _ in range(5)]
    build.job(owner_id=bob.id)

    page = list_jobs(session=session, owner_id=alice.id, limit=2)
    assert [j.id for j in page.items] == mine[::-1][:2] and page.total == 5 and page.next_cursor == 2
    rest = list_jobs(session=session, owner_id=alice.id, limit=10, offset=2)
    assert [j.id for j in rest.items] == mine[::-1][2:] and rest.next_cursor is None
    assert list_jobs(session=session).total == 6
    assert list_jobs(session=session, state=JobState.RUNNING).total == 0
    with pytest.raises(ValueError):
        list_jobs(session=session, limit=0)


def test_delete_job_removes_its_rows_and_code(session: Session, build: Any) -> None:
    shared = build.problem()
    bundled = build.problem(source="bundled source", bundled_id="level1/relu")
    private = build.problem(source="private source")
    keep = build.job(problem_id=shared.id, target=Target.CUDA)  # never claimed below
    jobs = [build.job(problem_id=p.id) for p in (shared, bundled, private)]
    for _ in jobs:
        claim_next_job(session=session, worker_id="w", target=Target.CPU, lease_seconds=LEASE)
    for job in jobs:
        trajectory = create_trajectory(session=session, job_id=job.id, index=0)
        append_message(session=session, trajectory_id=trajectory.id, role="user", content="go")
        parent = record_attempt(
            session=session,
            job_id=job.id,
            trajectory_id=trajectory.id,
            tool="benchmark",
            source="a",
            parent_id=None,
            verdict=build.verdict(),
        )
        record_attempt(
            session=session,
            job_id=job.id,
            trajectory_id=trajectory.id,
            tool="benchmark",
            source="b",
            parent_id=parent.id,
            verdict=build.verdict(Status.FAIL, correct=False),
        )
    with pytest.raises(IllegalTransition, match="cancel it first"):
        delete_job(session=session, job_id=jobs[0].id)
    for job in jobs:
        finish_job(session=session, job_id=job.id, worker_id="w", state=JobState.SUCCEEDED)
    session.commit()

    for job in jobs:
        delete_job(session=session, job_id=job.id)
    session.commit()

    def count(model: type[Any], *where: Any) -> int:
        return session.scalar(select(func.count()).select_from(model).where(*where)) or 0

    gone = [j.id for j in jobs]
    assert count(Job, Job.id.in_(gone)) == 0
    assert count(Attempt) == 0 and count(Message) == 0 and count(Trajectory) == 0
    assert count(JobEvent, JobEvent.job_id.in_(gone)) == 0
    assert count(JobEvent, JobEvent.job_id == keep.id) == 1
    # The private source went with its only job; the shared and bundled ones stay.
    assert {p.id for p in session.scalars(select(StoredProblem))} == {shared.id, bundled.id}
    with pytest.raises(NotFound):
        delete_job(session=session, job_id=jobs[0].id)


def test_claim_stores_a_non_utc_start_in_utc(session: Session, build: Any) -> None:
    job = build.job()
    local = datetime(2026, 1, 1, 15, 0, tzinfo=timezone(timedelta(hours=3)))
    claim_next_job(session=session, worker_id="w", target=Target.CPU, lease_seconds=LEASE, now=local)
    session.commit()
    session.expire_all()
    stored = get_job(session=session, job_id=job.id)
    assert stored.started_at == local == T0 and stored.started_at.tzinfo == UTC
    assert stored.lease_expires_at == T0 + timedelta(seconds=LEASE)


def test_create_jobs_stores_what_create_job_does_in_two_inserts(session: Session, build: Any) -> None:
    problem = build.problem()
    single = create_job(session=session, problem_id=problem.id, target=Target.CPU, budgets={"turns": 3})
    specs = [
        NewJob(problem_id=problem.id, target=Target.CPU, budgets={"turns": 3}),
        NewJob(problem_id=problem.id, target=Target.CUDA, kind=JobKind.EVALUATION, candidate_source="x = 1"),
    ]
    jobs = create_jobs(session=session, specs=specs)
    assert [j.id for j in jobs] == [single.id + 1, single.id + 2]
    columns = ("kind", "state", "target", "budgets", "trajectories_count", "last_event_id", "attempts_count")
    assert [getattr(jobs[0], c) for c in columns] == [getattr(single, c) for c in columns]
    assert (jobs[1].kind, jobs[1].trajectories_count, jobs[1].candidate_source) == (JobKind.EVALUATION, 0, "x = 1")
    for job in [single, *jobs]:
        events = events_after(session=session, job_id=job.id)
        assert [(e.id, e.type, e.payload) for e in events] == [(1, "state", {"state": "queued"})]
    # The next event of a job made by create_jobs follows on.
    claimed = claim_job(session=session, job_id=jobs[0].id, worker_id="w", lease_seconds=60)
    assert claimed is not None and claimed.last_event_id == 2
    assert [e.id for e in events_after(session=session, job_id=jobs[0].id)] == [1, 2]
    with pytest.raises(ValueError):
        create_jobs(session=session, specs=[NewJob(problem_id=problem.id, target=Target.CPU, trajectories_count=0)])
