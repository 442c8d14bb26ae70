"""The service's persistence: SQLAlchemy models, sessions and data access (DESIGN §5).

The one place that knows the schema. Everything public is re-exported here; import from
``store``, not from its modules. Data-access functions are keyword-only, take a `Session`,
flush but never commit: the caller's `session_scope` is the unit of work (see `store.db`).
Exceptions: `StoreError` and its subclasses (`store.errors`).

Owns: the schema, sessions, job states and their transitions (`store.states`), claims and leases
(`store.leases`), attempts (`store.attempts`: the best-attempt rule is `Verdict.is_verified`),
events, API keys.
May import: SQLAlchemy and `harness`'s value types (`Verdict`, `Target`, `source_sha256`); never
the agent, the worker or the API.
In and out: plain values and `Verdict`s come in (serialised at the column: ``Verdict.to_dict()``);
ORM rows and frozen `RowPage`s go out.
"""

from store.apikeys import (
    API_KEY_PREFIX,
    IssuedKey,
    KeyLimits,
    KeyUsage,
    create_api_key,
    hash_api_key,
    key_cost_left,
    key_usage,
    lock_key_usage,
    lock_keys_usage,
    revoke_api_key,
    verify_api_key,
)
from store.attempts import (
    find_attempt_by_source,
    get_attempt,
    list_attempts,
    record_attempt,
    source_sha256,
    verdict_figures,
)
from store.db import make_engine, make_session_factory, session_scope
from store.errors import IllegalTransition, LeaseLost, NotFound, StoreError
from store.events import EventType, JobHead, append_event, events_after, job_heads
from store.jobs import (
    CancelOutcome,
    JobProblem,
    NewJob,
    add_job_usage,
    cancel_job,
    create_job,
    create_jobs,
    delete_job,
    discard_new_jobs,
    get_job,
    list_job_problems,
    list_jobs,
)
from store.leases import (
    LeaseStatus,
    ReapedJob,
    claim_job,
    claim_next_job,
    finish_job,
    heartbeat,
    reap_expired_leases,
    redispatch_stale_jobs,
)
from store.models import (
    ApiKey,
    Attempt,
    Base,
    Baseline,
    Job,
    JobEvent,
    Message,
    StoredProblem,
    Trajectory,
    utcnow,
)
from store.pagination import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Page, RowPage, check_limit, keyset_page, offset_page
from store.problems import get_baseline, get_or_create_problem, get_problem, put_baseline
from store.states import ALLOWED_TRANSITIONS, JobKind, JobState, Target, TrajectoryState, transition
from store.stats import StoreCounts, read_store_counts
from store.trajectories import (
    append_message,
    create_trajectory,
    list_messages,
    list_trajectories,
    set_trajectory_state,
)

__all__ = [
    "ALLOWED_TRANSITIONS",
    "API_KEY_PREFIX",
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "ApiKey",
    "Attempt",
    "Base",
    "Baseline",
    "CancelOutcome",
    "EventType",
    "IllegalTransition",
    "IssuedKey",
    "Job",
    "JobEvent",
    "JobHead",
    "JobKind",
    "JobProblem",
    "JobState",
    "KeyLimits",
    "KeyUsage",
    "LeaseLost",
    "LeaseStatus",
    "Message",
    "NewJob",
    "NotFound",
    "Page",
    "ReapedJob",
    "RowPage",
    "StoreCounts",
    "StoreError",
    "StoredProblem",
    "Target",
    "Trajectory",
    "TrajectoryState",
    "add_job_usage",
    "append_event",
    "append_message",
    "cancel_job",
    "check_limit",
    "claim_job",
    "claim_next_job",
    "create_api_key",
    "create_job",
    "create_jobs",
    "create_trajectory",
    "delete_job",
    "discard_new_jobs",
    "events_after",
    "find_attempt_by_source",
    "finish_job",
    "get_attempt",
    "get_baseline",
    "get_job",
    "get_or_create_problem",
    "get_problem",
    "hash_api_key",
    "heartbeat",
    "job_heads",
    "key_cost_left",
    "key_usage",
    "keyset_page",
    "list_attempts",
    "list_job_problems",
    "list_jobs",
    "list_messages",
    "list_trajectories",
    "lock_key_usage",
    "lock_keys_usage",
    "make_engine",
    "make_session_factory",
    "offset_page",
    "put_baseline",
    "read_store_counts",
    "reap_expired_leases",
    "record_attempt",
    "redispatch_stale_jobs",
    "revoke_api_key",
    "session_scope",
    "set_trajectory_state",
    "source_sha256",
    "transition",
    "utcnow",
    "verdict_figures",
    "verify_api_key",
]
