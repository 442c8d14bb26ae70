"""API keys: issued once in plaintext, stored as SHA-256, verified by digest; and their usage.

A key is ``kl_`` and 43 URL-safe characters (256 random bits). With that much entropy a plain,
unsalted SHA-256 is enough: nothing can be guessed, and lookup by digest stays one index probe.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from store._sql import dialect_name, write_row
from store.errors import NotFound
from store.models import ApiKey, Job, utcnow
from store.states import JobState
from vocabulary.budgets import DEFAULT_COST_CAP_USD, DEFAULT_MAX_CONCURRENT_JOBS, DEFAULT_MAX_JOBS_PER_DAY

__all__ = [
    "API_KEY_PREFIX",
    "IssuedKey",
    "KeyLimits",
    "KeyUsage",
    "create_api_key",
    "hash_api_key",
    "key_cost_left",
    "key_usage",
    "lock_key_usage",
    "lock_keys_usage",
    "revoke_api_key",
    "set_api_key_admin",
    "verify_api_key",
]

API_KEY_PREFIX = "kl_"
_KEY_RANDOM_BYTES = 32
# Characters of the plaintext kept to recognise a key in listings: the prefix and 7 more.
_SHOWN_CHARS = len(API_KEY_PREFIX) + 7
# Anything longer is not one of our keys; refuse before hashing it.
_MAX_KEY_CHARS = 128


@dataclass(frozen=True)
class IssuedKey:
    """A new key's row and its plaintext: show the plaintext once, it is not stored."""

    key: ApiKey
    plaintext: str


@dataclass(frozen=True)
class KeyUsage:
    """What a key's quotas are checked against."""

    #: Jobs queued or running.
    active_jobs: int
    #: Jobs created since the given time.
    jobs_since: int
    #: Cost of all the key's jobs so far.
    cost_usd: float


@dataclass(frozen=True)
class KeyLimits:
    """A key's quotas and revocation, as read under `lock_key_usage`'s lock (fresher than a key
    the API verified a moment ago and may have cached)."""

    revoked: bool
    max_concurrent_jobs: int
    max_jobs_per_day: int
    cost_cap_usd: float | None


def hash_api_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def create_api_key(
    *,
    session: Session,
    name: str,
    owner: str,
    is_admin: bool = False,
    max_concurrent_jobs: int = DEFAULT_MAX_CONCURRENT_JOBS,
    max_jobs_per_day: int = DEFAULT_MAX_JOBS_PER_DAY,
    cost_cap_usd: float | None = DEFAULT_COST_CAP_USD,
    now: datetime | None = None,
) -> IssuedKey:
    """Issue a key. The plaintext exists only in the returned value."""
    plaintext = API_KEY_PREFIX + secrets.token_urlsafe(_KEY_RANDOM_BYTES)
    key = ApiKey(
        name=name,
        owner=owner,
        key_prefix=plaintext[:_SHOWN_CHARS],
        key_hash=hash_api_key(plaintext),
        is_admin=is_admin,
        max_concurrent_jobs=max_concurrent_jobs,
        max_jobs_per_day=max_jobs_per_day,
        cost_cap_usd=cost_cap_usd,
        created_at=now or utcnow(),
    )
    session.add(key)
    session.flush()
    return IssuedKey(key=key, plaintext=plaintext)


def verify_api_key(*, session: Session, plaintext: str) -> ApiKey | None:
    """The live key with this plaintext; ``None`` if unknown or revoked."""
    if not plaintext or len(plaintext) > _MAX_KEY_CHARS:
        return None
    digest = hash_api_key(plaintext)
    key = session.scalars(select(ApiKey).where(ApiKey.key_hash == digest)).first()
    if key is None or not hmac.compare_digest(key.key_hash, digest) or key.is_revoked:
        return None
    return key


def revoke_api_key(*, session: Session, api_key_id: int, now: datetime | None = None) -> ApiKey:
    """Revoke a key (idempotent: the first revocation time stays). Its jobs stay.

    Raises:
        NotFound: no key with that id.
    """
    stmt = (
        update(ApiKey)
        .where(ApiKey.id == api_key_id, ApiKey.revoked_at.is_(None))
        .values(revoked_at=now or utcnow())
        .returning(ApiKey.id)
    )
    write_row(session, ApiKey, api_key_id, stmt)
    key = session.get(ApiKey, api_key_id)
    if key is None:
        raise NotFound("api key", api_key_id)
    return key


def set_api_key_admin(*, session: Session, api_key_id: int, is_admin: bool) -> ApiKey:
    """Make a key an admin (it sees and manages every key's jobs) or a plain key (its own).

    Raises:
        NotFound: no key with that id.
    """
    key = session.get(ApiKey, api_key_id)
    if key is None:
        raise NotFound("api key", api_key_id)
    key.is_admin = is_admin
    session.flush()
    return key


def key_usage(*, session: Session, api_key_id: int, since: datetime) -> KeyUsage:
    """Counts for the key's quotas (active jobs, jobs created since ``since``, total cost), read
    under a lock on the key that lasts until the caller's transaction ends.

    Check the quotas and create the job in one transaction: a concurrent submission of the same
    key then waits here until this one commits, and counts its job. Without the lock, two
    requests would both read "one slot left" and both create a job. The counts include the jobs
    this transaction created, so the lock can be taken after the insert and held only for the
    count and the commit (what `api.services` does). PostgreSQL: ``SELECT … FOR NO KEY UPDATE``
    of the key's row (the strongest lock that does not wait for the key-share locks which
    inserting a job of the key takes). SQLite has no row locks, and its driver only begins a
    transaction at the first write: a no-op ``UPDATE`` of the key takes the database's write lock
    (if this transaction does not hold it yet), so the counts see every committed job and no one
    writes until commit.

    Raises:
        NotFound: no key with that id.
    """
    return lock_key_usage(session=session, api_key_id=api_key_id, since=since)[1]


def lock_key_usage(*, session: Session, api_key_id: int, since: datetime) -> tuple[KeyLimits, KeyUsage]:
    """`key_usage`, and the key's limits read by the same locking statement: `lock_keys_usage`
    of one key.

    Raises:
        NotFound: no key with that id.
    """
    return lock_keys_usage(session=session, api_key_ids=[api_key_id], since=since)[api_key_id]


def lock_keys_usage(
    *, session: Session, api_key_ids: Collection[int], since: datetime
) -> dict[int, tuple[KeyLimits, KeyUsage]]:
    """Lock several keys (in id order, so two transactions locking overlapping sets never wait for
    each other in a cycle) and read their limits and usage, in two statements however many keys:
    the locking one, which returns the limits, and then the counts (a statement of its own, so
    that its snapshot, taken after any wait for a lock, sees what the holder committed).

    Raises:
        NotFound: one of the keys does not exist (nothing is returned).
    """
    ids = sorted(set(api_key_ids))
    columns = (ApiKey.id, ApiKey.revoked_at, ApiKey.max_concurrent_jobs, ApiKey.max_jobs_per_day,
               ApiKey.cost_cap_usd)
    if dialect_name(session) == "sqlite":
        lock: Any = update(ApiKey).where(ApiKey.id.in_(ids)).values(id=ApiKey.id).returning(*columns)
    else:
        # LockRows runs above the sort: the rows are locked in id order.
        lock = select(*columns).where(ApiKey.id.in_(ids)).order_by(ApiKey.id).with_for_update(key_share=True)
    limits = {
        row[0]: KeyLimits(revoked=row[1] is not None, max_concurrent_jobs=row[2], max_jobs_per_day=row[3],
                          cost_cap_usd=row[4])
        for row in session.execute(lock.execution_options(synchronize_session=False))
    }
    missing = [key_id for key_id in ids if key_id not in limits]
    if missing:
        raise NotFound("api key", missing[0])
    counts = {
        owner: KeyUsage(active_jobs=int(active or 0), jobs_since=int(recent or 0), cost_usd=float(cost or 0.0))
        for owner, active, recent, cost in session.execute(
            select(
                Job.owner_id,
                func.count().filter(Job.state.in_([JobState.QUEUED, JobState.RUNNING])),
                func.count().filter(Job.created_at >= since),
                func.coalesce(func.sum(Job.cost_usd), 0.0),
            ).where(Job.owner_id.in_(ids)).group_by(Job.owner_id)
        )
    }
    unused = KeyUsage(active_jobs=0, jobs_since=0, cost_usd=0.0)
    return {key_id: (limits[key_id], counts.get(key_id, unused)) for key_id in ids}


def key_cost_left(*, session: Session, api_key_id: int) -> float | None:
    """What the key may still spend: its cost cap minus what its jobs have cost (never below 0),
    ``None`` without a cap. Read without a lock: cost grows as jobs run, not as they are
    submitted, so `key_usage`'s lock would not make it more exact.

    Raises:
        NotFound: no key with that id.
    """
    row = session.execute(
        select(ApiKey.cost_cap_usd, select(func.coalesce(func.sum(Job.cost_usd), 0.0))
               .where(Job.owner_id == api_key_id).scalar_subquery())
        .where(ApiKey.id == api_key_id)
    ).one_or_none()
    if row is None:
        raise NotFound("api key", api_key_id)
    cap, cost = row
    return None if cap is None else max(float(cap) - float(cost or 0.0), 0.0)
