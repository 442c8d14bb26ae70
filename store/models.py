"""The schema: SQLAlchemy 2 declarative models. The only module that knows table and column names.

Conventions (they are what makes the same migrations run on SQLite and PostgreSQL):

- Every constraint and index is named through `NAMING_CONVENTION`, so Alembic's batch mode can
  find and rebuild them on SQLite.
- JSON columns are `sqlalchemy.JSON` (``json`` on PostgreSQL, text on SQLite); Python ``None``
  in a nullable JSON column is SQL ``NULL``, not the JSON ``null``.
- Timestamps are timezone-aware UTC in Python (`UTCDateTime`): ``timestamptz`` on PostgreSQL,
  naive UTC text on SQLite, which has no time zones. Naive datetimes are refused.
- Surrogate ids are never handed out twice: ``sqlite_autoincrement`` on every table with one
  (SQLite would otherwise reuse a deleted row's id; PostgreSQL identities never do).
- Enums are stored as their string values in a ``VARCHAR`` with a ``CHECK`` constraint (no
  PostgreSQL ``ENUM`` types to migrate).
- Counters that hand out per-parent numbers (``jobs.last_event_id``, ``jobs.attempts_count``,
  ``trajectories.messages_count``) are bumped with one ``UPDATE … RETURNING`` that also locks
  the parent row until commit: that single writer is what keeps event ids, attempt numbers and
  message numbers dense and ordered by commit time (see `store.events`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any

import sqlalchemy as sa
from sqlalchemy import ForeignKey, MetaData, String, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from store.states import JobKind, JobState, ModelRunState, Target, TrajectoryState
from vocabulary.budgets import DEFAULT_COST_CAP_USD, DEFAULT_MAX_CONCURRENT_JOBS, DEFAULT_MAX_JOBS_PER_DAY
from vocabulary.figures import AttemptFigures
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from vocabulary.wire import JsonObject

__all__ = [
    "NAMING_CONVENTION",
    "ApiKey",
    "Attempt",
    "Base",
    "Baseline",
    "Job",
    "JobEvent",
    "Message",
    "ModelRegion",
    "ModelRun",
    "StoredProblem",
    "Trajectory",
    "UTCDateTime",
    "utcnow",
]

NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Long enough for every value of the enums above with room to grow without a migration.
_ENUM_LENGTH = 32


def utcnow() -> datetime:
    """Now, timezone-aware UTC: the only clock the store uses when a caller passes none."""
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the store only takes timezone-aware datetimes")
        value = value.astimezone(UTC)
        # SQLite stores text without an offset; keeping every value in UTC keeps comparisons right.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _enum(enum_cls: type[Enum], name: str) -> sa.Enum:
    return sa.Enum(
        enum_cls,
        name=name,
        native_enum=False,
        create_constraint=True,
        length=_ENUM_LENGTH,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


_JSON = sa.JSON(none_as_null=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 (SQLAlchemy reads it as a class attribute)
        datetime: UTCDateTime(),
    }


class ApiKey(Base):
    """A client's key. Only its SHA-256 is stored; the plaintext is shown once, at creation."""

    __tablename__ = "api_keys"
    __table_args__ = ({"sqlite_autoincrement": True},)  # ids never reused (migration 0005)

    id: Mapped[int] = mapped_column(primary_key=True)
    #: A label for the key ("alice's laptop").
    name: Mapped[str] = mapped_column(String(128))
    #: Who the key belongs to (a person or a team); several keys may share an owner.
    owner: Mapped[str] = mapped_column(String(128), index=True)
    #: The first characters of the plaintext, to recognise a key in listings.
    key_prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(default=False, server_default=sa.false())
    max_concurrent_jobs: Mapped[int] = mapped_column(default=DEFAULT_MAX_CONCURRENT_JOBS)
    max_jobs_per_day: Mapped[int] = mapped_column(default=DEFAULT_MAX_JOBS_PER_DAY)
    #: The most this key's jobs may cost, all together; ``None`` for no cap.
    cost_cap_usd: Mapped[float | None] = mapped_column(default=DEFAULT_COST_CAP_USD)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None


class StoredProblem(Base):
    """A reference problem's source as a job saw it (``problems.spec.Problem`` is the parsed form)."""

    __tablename__ = "problems"
    __table_args__ = ({"sqlite_autoincrement": True},)  # ids never reused (migration 0005)

    id: Mapped[int] = mapped_column(primary_key=True)
    #: The bundled id (``level2/conv_bn_scale_train``) or ``None`` for a user's source.
    bundled_id: Mapped[str | None] = mapped_column(String(128), index=True)
    source: Mapped[str] = mapped_column(Text)
    #: One row per distinct source: jobs on the same source share it.
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    #: The parsed declarations (``Problem.to_dict()`` without the source).
    declarations: Mapped[JsonObject] = mapped_column(_JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # What `claim_next_job` scans: the oldest queued job of one target.
        sa.Index("ix_jobs_state_target_id", "state", "target", "id"),
        {"sqlite_autoincrement": True},  # ids never reused (migration 0005)
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[JobKind] = mapped_column(_enum(JobKind, "job_kind"), default=JobKind.AGENT)
    #: The API key that created the job; ``None`` for jobs created locally by the CLI.
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id"), index=True)
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"), index=True)
    target: Mapped[Target] = mapped_column(_enum(Target, "target"))
    #: The candidate of an evaluation job (``kind == "evaluation"``); ``None`` for agent jobs.
    candidate_source: Mapped[str | None] = mapped_column(Text)
    llm_profile: Mapped[str | None] = mapped_column(String(64))
    llm_model: Mapped[str | None] = mapped_column(String(128))
    budgets: Mapped[JsonObject] = mapped_column(_JSON, default=dict)
    trajectories_count: Mapped[int] = mapped_column(default=1, server_default=sa.text("1"))

    state: Mapped[JobState] = mapped_column(_enum(JobState, "job_state"), default=JobState.QUEUED)
    #: Set by a cancel of a running job; the worker sees it at its next heartbeat.
    cancel_requested: Mapped[bool] = mapped_column(default=False, server_default=sa.false())
    error: Mapped[str | None] = mapped_column(Text)

    # The lease: who runs the job, and until when the claim holds without a heartbeat.
    worker_id: Mapped[str | None] = mapped_column(String(128))
    heartbeat_at: Mapped[datetime | None]
    lease_expires_at: Mapped[datetime | None]
    #: How many times the reaper handed the job back to the queue after a lease expired.
    requeue_count: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    #: When workers were last told of the queued job again (a re-queue, or a re-dispatch of a job
    #: nobody claimed, see `store.jobs.redispatch_stale_jobs`); ``None``: only when it was created.
    dispatched_at: Mapped[datetime | None]

    #: Attempts stored so far; also the allocator of ``attempts.n`` (the ``n`` of the API).
    attempts_count: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    best_attempt_id: Mapped[int | None] = mapped_column(
        ForeignKey("attempts.id", use_alter=True, ondelete="SET NULL")
    )
    #: The id of the newest event; the next event gets this plus one (see `store.events`).
    last_event_id: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))

    tokens_in: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    tokens_out: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    cost_usd: Mapped[float] = mapped_column(default=0.0, server_default=sa.text("0"))
    gpu_seconds: Mapped[float] = mapped_column(default=0.0, server_default=sa.text("0"))
    #: Of ``tokens_out``: the models' hidden reasoning; of ``tokens_in``: served from prompt caches.
    tokens_reasoning: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    tokens_cached: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))

    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    # Loaded on access only: a listing of jobs must not drag every problem's source along.
    problem: Mapped[StoredProblem] = relationship(viewonly=True)
    best_attempt: Mapped[Attempt | None] = relationship(foreign_keys=[best_attempt_id], viewonly=True)


class Trajectory(Base):
    """One independent chat of a job."""

    __tablename__ = "trajectories"
    __table_args__ = (sa.UniqueConstraint("job_id", "index"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    #: 0-based position within the job.
    index: Mapped[int]
    temperature: Mapped[float | None]
    strategy_hint: Mapped[str | None] = mapped_column(Text)
    state: Mapped[TrajectoryState] = mapped_column(
        _enum(TrajectoryState, "trajectory_state"), default=TrajectoryState.PENDING
    )
    #: Assistant turns and tool calls so far: what the per-trajectory budgets count.
    turns: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    tool_calls: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    #: Messages stored so far; also the allocator of ``messages.seq``.
    messages_count: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    best_attempt_id: Mapped[int | None] = mapped_column(
        ForeignKey("attempts.id", use_alter=True, ondelete="SET NULL")
    )
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class Message(Base):
    """One chat message: what the LLM was sent or answered, with its usage."""

    __tablename__ = "messages"
    __table_args__ = (sa.UniqueConstraint("trajectory_id", "seq"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(primary_key=True)
    trajectory_id: Mapped[int] = mapped_column(ForeignKey("trajectories.id", ondelete="CASCADE"))
    #: 1-based position within the trajectory.
    seq: Mapped[int]
    #: ``system``, ``user``, ``assistant`` or ``tool`` (OpenAI chat roles).
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str | None] = mapped_column(Text)
    #: The assistant's function calls, as the provider returned them.
    tool_calls: Mapped[list[JsonObject] | None] = mapped_column(_JSON)
    #: For a ``tool`` message: the call it answers.
    tool_call_id: Mapped[str | None] = mapped_column(String(128))
    tokens_in: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    tokens_out: Mapped[int] = mapped_column(default=0, server_default=sa.text("0"))
    latency_ms: Mapped[float | None]
    cost_usd: Mapped[float] = mapped_column(default=0.0, server_default=sa.text("0"))
    #: Of ``tokens_out``, the hidden reasoning; of ``tokens_in``, the part served from the server's
    #: prompt cache. ``None``: not reported (or stored before these were recorded).
    tokens_reasoning: Mapped[int | None]
    tokens_cached: Mapped[int | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Attempt(Base):
    """One evaluated candidate: its source, its verdict and the verdict's key figures."""

    __tablename__ = "attempts"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "n"),
        # What `find_attempt_by_source` looks up.
        sa.Index("ix_attempts_job_id_sha256", "job_id", "sha256"),
        {"sqlite_autoincrement": True},  # ids never reused (migration 0005)
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    #: ``None`` for an evaluation job's attempt (no LLM).
    trajectory_id: Mapped[int | None] = mapped_column(
        ForeignKey("trajectories.id", ondelete="CASCADE"), index=True
    )
    #: 1-based number within the job: the ``n`` of ``/jobs/{id}/attempts/{n}``.
    n: Mapped[int]
    #: The tool that ran it: ``compile``, ``check_correctness``, ``benchmark``, ``profile``,
    #: ``submit``, ``evaluate`` for an evaluation job, or ``retime`` for the worker's re-judging
    #: of a quarantined or best candidate in a fresh process.
    tool: Mapped[str] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    #: The attempt this one was edited from, when the agent says so.
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id", ondelete="SET NULL"))
    #: ``Verdict.to_dict()``, whole.
    verdict: Mapped[JsonObject] = mapped_column(_JSON)

    # The verdict's key figures, copied out of it for listings, sorting and best-attempt choice.
    status: Mapped[Status] = mapped_column(_enum(Status, "attempt_status"))
    #: A `vocabulary.verdict.Stage` value; plain text so a new stage needs no migration.
    stage: Mapped[str] = mapped_column(String(32))
    error_kind: Mapped[ErrorKind | None] = mapped_column(_enum(ErrorKind, "attempt_error_kind"))
    correct: Mapped[bool]
    median_ms: Mapped[float | None]
    speedup_vs_eager: Mapped[float | None]
    speedup_vs_compile: Mapped[float | None]
    pct_of_sol: Mapped[float | None]
    compile_s: Mapped[float | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    def read_verdict(self) -> Verdict:
        """The stored verdict, typed: the one way to read it (`Verdict.from_dict`)."""
        return Verdict.from_dict(self.verdict)

    @property
    def figures(self) -> AttemptFigures:
        """The figures its columns hold (copied out of its verdict when it was recorded)."""
        return AttemptFigures(status=self.status, stage=Stage(self.stage), error_kind=self.error_kind,
                              correct=self.correct, median_ms=self.median_ms, speedup_vs_eager=self.speedup_vs_eager,
                              speedup_vs_compile=self.speedup_vs_compile, pct_of_sol=self.pct_of_sol,
                              compile_s=self.compile_s)


class Baseline(Base):
    """Eager and ``torch.compile`` timings of a problem on a device, cached across jobs."""

    __tablename__ = "baselines"
    __table_args__ = (sa.UniqueConstraint("problem_sha256", "device", "provenance_key"),
                      {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(primary_key=True)
    problem_sha256: Mapped[str] = mapped_column(String(64))
    #: The device name as the harness reports it.
    device: Mapped[str] = mapped_column(String(128))
    #: A digest of everything the timing depends on (driver, torch, CUDA, mode, compile mode …).
    provenance_key: Mapped[str] = mapped_column(String(128))
    eager_ms: Mapped[float | None]
    compile_ms: Mapped[float | None]
    provenance: Mapped[JsonObject] = mapped_column(_JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class JobEvent(Base):
    """One entry of a job's live stream. ``id`` counts per job from 1: the SSE event id."""

    __tablename__ = "job_events"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    type: Mapped[str] = mapped_column(String(32))
    payload: Mapped[JsonObject] = mapped_column(_JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ModelRun(Base):
    """A user's model optimised region by region: one agent job per selected region, then the
    whole patched model verified and timed (``report``: `vocabulary.modelreport.ApplyReport`)."""

    __tablename__ = "model_runs"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(primary_key=True)
    #: The API key that created the run; ``None`` for runs created locally by the CLI.
    owner_id: Mapped[int | None] = mapped_column(ForeignKey("api_keys.id"), index=True)
    #: The model file's name (``mlp_stack.py``).
    name: Mapped[str] = mapped_column(String(128))
    model_source: Mapped[str] = mapped_column(Text)
    model_sha256: Mapped[str] = mapped_column(String(64))
    target: Mapped[Target] = mapped_column(_enum(Target, "target"))
    llm_profile: Mapped[str | None] = mapped_column(String(64))
    llm_model: Mapped[str | None] = mapped_column(String(128))
    #: The budgets asked for the whole run, before they were split by share.
    budgets: Mapped[JsonObject] = mapped_column(_JSON, default=dict)
    #: `vocabulary.regionplan.ModelProfile.to_dict()`: the regions (with their sources) and shares.
    profile: Mapped[JsonObject] = mapped_column(_JSON)
    state: Mapped[ModelRunState] = mapped_column(_enum(ModelRunState, "model_run_state"),
                                                 default=ModelRunState.RUNNING)
    #: `vocabulary.modelreport.ApplyReport.to_dict()` once the whole model was verified.
    report: Mapped[dict[str, Any] | None] = mapped_column(_JSON)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    finished_at: Mapped[datetime | None]


class ModelRegion(Base):
    """One selected region of a model run and the job that optimises it."""

    __tablename__ = "model_regions"
    __table_args__ = (sa.UniqueConstraint("model_run_id", "name"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(primary_key=True)
    model_run_id: Mapped[int] = mapped_column(ForeignKey("model_runs.id", ondelete="CASCADE"), index=True)
    #: The region's name in the profile (``r2_linear_gelu``).
    name: Mapped[str] = mapped_column(String(128))
    #: Its share of the model's time when profiled; its budgets were split by it.
    share: Mapped[float]
    #: 0-based, largest share first.
    position: Mapped[int]
    #: ``None`` once the job was deleted.
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
