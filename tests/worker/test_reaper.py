"""The reaper on its own: expired leases go back to the queue and are sent again, even after a broker outage."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store import JobState, Target, claim_job, get_job, session_scope
from tests.support.worker import evaluation_job
from worker.reaper import Reaper, reap_once


def _expired_job(factory: sessionmaker[Session], target: Target = Target.CPU) -> int:
    with session_scope(factory) as session:
        job_id = evaluation_job(session, target=target)
    with session_scope(factory) as session:
        claim_job(session=session, job_id=job_id, worker_id="dead", lease_seconds=0.01)
    time.sleep(0.05)
    return job_id


def test_requeued_jobs_are_dispatched_to_their_target(sqlite_factory: sessionmaker[Session]) -> None:
    cpu, cuda = _expired_job(sqlite_factory), _expired_job(sqlite_factory, Target.CUDA)
    sent: list[tuple[int, Target]] = []
    reaped = reap_once(session_factory=sqlite_factory, max_requeues=1, dispatch=lambda *a: sent.append(a))
    assert [r.job_id for r in reaped] == [cpu, cuda] and all(r.state is JobState.QUEUED for r in reaped)
    assert sent == [(cpu, Target.CPU), (cuda, Target.CUDA)]
    assert reap_once(session_factory=sqlite_factory, max_requeues=1, dispatch=lambda *a: sent.append(a)) == []


def test_a_message_the_broker_refused_is_sent_again_while_the_job_is_queued(
    sqlite_factory: sessionmaker[Session],
) -> None:
    broker_up = False
    sent: list[int] = []

    def dispatch(job_id: int, target: Target) -> None:
        if not broker_up:
            raise ConnectionError("redis is down")
        sent.append(job_id)

    reaper = Reaper(session_factory=sqlite_factory, max_requeues=2, interval_s=60, dispatch=dispatch)
    first, second = _expired_job(sqlite_factory), _expired_job(sqlite_factory)
    assert len(reaper.run_pass()) == 2 and sent == []
    with session_scope(sqlite_factory) as session:  # meanwhile an embedded poller took the second
        claim_job(session=session, job_id=second, worker_id="alive", lease_seconds=60)
    reaper.run_pass()  # still down: nothing sent, nothing lost
    broker_up = True
    reaper.run_pass()
    assert sent == [first]  # the second is running: no message for it
    reaper.run_pass()
    assert sent == [first]
    with session_scope(sqlite_factory) as session:
        assert get_job(session=session, job_id=first).state is JobState.QUEUED


def test_the_reaper_refuses_a_zero_interval(sqlite_factory: sessionmaker[Session]) -> None:
    with pytest.raises(ValueError):
        Reaper(session_factory=sqlite_factory, max_requeues=1, interval_s=0)


def test_a_job_whose_message_was_never_sent_is_dispatched_again(sqlite_factory: sessionmaker[Session]) -> None:
    """The API committed a job and died before sending its message: a reaper sends it, once per period."""
    with session_scope(sqlite_factory) as session:
        lost, taken = evaluation_job(session), evaluation_job(session)
    with session_scope(sqlite_factory) as session:
        claim_job(session=session, job_id=taken, worker_id="alive", lease_seconds=60)
    sent: list[tuple[int, Target]] = []

    def reap() -> None:
        reap_once(session_factory=sqlite_factory, max_requeues=1, dispatch=lambda *a: sent.append(a),
                  redispatch_after_s=0.3)

    reap()
    assert sent == []  # too young: its own message may still be on its way
    time.sleep(0.4)
    reap()
    assert sent == [(lost, Target.CPU)]
    reap()
    assert sent == [(lost, Target.CPU)]  # not again before another period
    time.sleep(0.4)
    reap()
    assert sent == [(lost, Target.CPU)] * 2
    # The embedded mode has nothing to send, and the database is its queue: nothing is picked.
    assert reap_once(session_factory=sqlite_factory, max_requeues=1, redispatch_after_s=0.3) == []
    with session_scope(sqlite_factory) as session:
        assert get_job(session=session, job_id=lost).state is JobState.QUEUED


def test_a_redispatch_the_broker_refused_is_sent_again_next_pass(sqlite_factory: sessionmaker[Session]) -> None:
    broker_up = False
    sent: list[int] = []

    def dispatch(job_id: int, target: Target) -> None:
        if not broker_up:
            raise ConnectionError("redis is down")
        sent.append(job_id)

    with session_scope(sqlite_factory) as session:
        lost = evaluation_job(session)
    reaper = Reaper(session_factory=sqlite_factory, max_requeues=1, interval_s=60, dispatch=dispatch,
                    redispatch_after_s=0.1)
    time.sleep(0.2)
    reaper.run_pass()
    assert sent == []
    broker_up = True
    reaper.run_pass()  # the undelivered message first, well before another period
    assert sent == [lost]
    with pytest.raises(ValueError):
        Reaper(session_factory=sqlite_factory, max_requeues=1, interval_s=60, redispatch_after_s=0)
