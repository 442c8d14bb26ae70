"""API keys: hashed at rest, verified by digest, revocable; usage for quotas."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from store import (
    API_KEY_PREFIX,
    ApiKey,
    JobState,
    KeyLimits,
    KeyUsage,
    NotFound,
    Target,
    add_job_usage,
    claim_next_job,
    create_api_key,
    create_job,
    finish_job,
    hash_api_key,
    key_cost_left,
    key_usage,
    lock_key_usage,
    lock_keys_usage,
    revoke_api_key,
    session_scope,
    verify_api_key,
)
from tests.support.store import Builders


def test_the_plaintext_is_returned_once_and_never_stored(session: Session) -> None:
    issued = create_api_key(session=session, name="laptop", owner="alice", is_admin=True, cost_cap_usd=5.0)
    session.commit()
    assert issued.plaintext.startswith(API_KEY_PREFIX) and len(issued.plaintext) > 40
    key = issued.key
    assert key.key_hash == hash_api_key(issued.plaintext) != issued.plaintext
    assert issued.plaintext.startswith(key.key_prefix) and len(key.key_prefix) < len(issued.plaintext) // 3
    stored_values = [str(getattr(key, c.key)) for c in ApiKey.__table__.columns]
    assert not any(issued.plaintext in value for value in stored_values)
    assert key.is_admin and key.cost_cap_usd == 5.0 and key.max_concurrent_jobs >= 1


def test_verify_then_revoke(session: Session) -> None:
    issued = create_api_key(session=session, name="ci", owner="bob")
    other = create_api_key(session=session, name="ci2", owner="bob")
    session.commit()
    verified = verify_api_key(session=session, plaintext=issued.plaintext)
    assert verified is not None and verified.id == issued.key.id
    assert verify_api_key(session=session, plaintext=issued.plaintext + "x") is None
    assert verify_api_key(session=session, plaintext="") is None
    assert verify_api_key(session=session, plaintext="kl_" + "a" * 1000) is None

    when = datetime(2026, 2, 1, tzinfo=UTC)
    revoked = revoke_api_key(session=session, api_key_id=issued.key.id, now=when)
    session.commit()
    assert revoked.revoked_at == when and revoked.is_revoked
    assert verify_api_key(session=session, plaintext=issued.plaintext) is None
    assert verify_api_key(session=session, plaintext=other.plaintext) is not None
    # Revoking again keeps the first time.
    assert revoke_api_key(session=session, api_key_id=issued.key.id).revoked_at == when


def test_key_usage_counts_what_quotas_need(session: Session, build: Any) -> None:
    key = create_api_key(session=session, name="k", owner="carol").key
    yesterday = datetime.now(UTC) - timedelta(days=1)
    old = build.job(owner_id=key.id, now=yesterday - timedelta(hours=1))
    running = build.job(owner_id=key.id)
    build.job(owner_id=key.id)
    claim_next_job(session=session, worker_id="w", target=Target.CPU, lease_seconds=60)  # the old one
    finish_job(session=session, job_id=old.id, worker_id="w", state=JobState.SUCCEEDED)
    add_job_usage(session=session, job_id=old.id, cost_usd=1.25, gpu_seconds=30.0)
    add_job_usage(session=session, job_id=running.id, cost_usd=0.5, tokens_in=10)

    usage = key_usage(session=session, api_key_id=key.id, since=yesterday)
    assert usage.active_jobs == 2
    assert usage.jobs_since == 2
    assert usage.cost_usd == 1.75


def test_lock_key_usage_reads_the_limits_with_the_lock(session: Session, build: Any) -> None:
    key = create_api_key(session=session, name="k", owner="dan", max_concurrent_jobs=3, max_jobs_per_day=7,
                         cost_cap_usd=2.5).key
    build.job(owner_id=key.id)
    limits, usage = lock_key_usage(session=session, api_key_id=key.id, since=datetime.now(UTC) - timedelta(days=1))
    assert limits == KeyLimits(revoked=False, max_concurrent_jobs=3, max_jobs_per_day=7, cost_cap_usd=2.5)
    assert (usage.active_jobs, usage.jobs_since) == (1, 1)
    revoke_api_key(session=session, api_key_id=key.id)
    limits, _ = lock_key_usage(session=session, api_key_id=key.id, since=datetime.now(UTC))
    assert limits.revoked
    with pytest.raises(NotFound):
        lock_key_usage(session=session, api_key_id=424242, since=datetime.now(UTC))


def test_lock_keys_usage_reads_several_keys_at_once(session: Session, build: Any) -> None:
    busy = create_api_key(session=session, name="busy", owner="eve", max_concurrent_jobs=4).key
    idle = create_api_key(session=session, name="idle", owner="eve", cost_cap_usd=None).key
    build.job(owner_id=busy.id)
    build.job(owner_id=busy.id)
    read = lock_keys_usage(session=session, api_key_ids={idle.id, busy.id},
                           since=datetime.now(UTC) - timedelta(days=1))
    assert list(read) == sorted([busy.id, idle.id])
    assert read[busy.id][0].max_concurrent_jobs == 4 and read[busy.id][1].active_jobs == 2
    assert read[idle.id][1] == KeyUsage(active_jobs=0, jobs_since=0, cost_usd=0.0)
    with pytest.raises(NotFound):
        lock_keys_usage(session=session, api_key_ids=[busy.id, 424242], since=datetime.now(UTC))


def test_key_cost_left_is_the_cap_minus_the_cost_never_below_zero(session: Session, build: Any) -> None:
    capped = create_api_key(session=session, name="capped", owner="fay", cost_cap_usd=2.0).key
    uncapped = create_api_key(session=session, name="uncapped", owner="fay", cost_cap_usd=None).key
    assert key_cost_left(session=session, api_key_id=capped.id) == 2.0
    add_job_usage(session=session, job_id=build.job(owner_id=capped.id).id, cost_usd=0.5)
    assert key_cost_left(session=session, api_key_id=capped.id) == 1.5
    add_job_usage(session=session, job_id=build.job(owner_id=capped.id).id, cost_usd=4.0)
    assert key_cost_left(session=session, api_key_id=capped.id) == 0.0
    assert key_cost_left(session=session, api_key_id=uncapped.id) is None
    with pytest.raises(NotFound):
        key_cost_left(session=session, api_key_id=424242)


def test_key_usage_serialises_concurrent_checks_of_one_key(factory: sessionmaker[Session]) -> None:
    """Submissions of one key that check its quota at the same moment take turns: the quota holds.

    Each thread does what `api.services` does in one transaction: read the usage, create a job if
    the key has room, commit. Without the key's row lock every thread reads the same count and
    all of them create a job.
    """
    limit, threads = 3, 12
    with session_scope(factory) as session:
        key_id = create_api_key(session=session, name="k", owner="dave", max_concurrent_jobs=limit).key.id
        problem_id = Builders(session).problem().id
    barrier = threading.Barrier(threads)

    def submit() -> int | None:
        barrier.wait(timeout=30)
        with session_scope(factory) as session:
            usage = key_usage(session=session, api_key_id=key_id, since=datetime.now(UTC) - timedelta(days=1))
            time.sleep(0.05)  # widen the window between the check and the insert, as a slow request would
            if usage.active_jobs >= limit:
                return None
            return create_job(session=session, problem_id=problem_id, target=Target.CPU, owner_id=key_id).id

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(submit) for _ in range(threads)]
        created = [job_id for future in futures if (job_id := future.result(timeout=60)) is not None]
    assert len(created) == limit
    with session_scope(factory) as session:
        usage = key_usage(session=session, api_key_id=key_id, since=datetime.now(UTC) - timedelta(days=1))
    assert usage.active_jobs == limit


def test_key_usage_of_an_unknown_key(session: Session) -> None:
    with pytest.raises(NotFound):
        key_usage(session=session, api_key_id=424242, since=datetime.now(UTC))
