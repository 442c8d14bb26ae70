"""API keys: hashed at rest, verified by digest, revocable; usage for quotas."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from store import (
    API_KEY_PREFIX,
    ApiKey,
    JobState,
    Target,
    add_job_usage,
    claim_next_job,
    create_api_key,
    finish_job,
    hash_api_key,
    key_usage,
    revoke_api_key,
    verify_api_key,
)


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
