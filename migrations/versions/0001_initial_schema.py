"""Initial schema: api keys, problems, jobs, trajectories, messages, attempts, baselines, events.

Types, lengths and enum values are written out here, not imported from `store.models`: the
models move on, a revision must not.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The tables whose best_attempt_id points forward at attempts (see the end of upgrade()).
_BEST_ATTEMPT_FKS = ("jobs", "trajectories")


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("key_prefix", sa.String(length=16), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("is_admin", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("max_concurrent_jobs", sa.Integer(), nullable=False),
        sa.Column("max_jobs_per_day", sa.Integer(), nullable=False),
        sa.Column("cost_cap_usd", sa.Double(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_index(op.f("ix_api_keys_owner"), "api_keys", ["owner"])
    op.create_table(
        "baselines",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("problem_sha256", sa.String(length=64), nullable=False),
        sa.Column("device", sa.String(length=128), nullable=False),
        sa.Column("provenance_key", sa.String(length=128), nullable=False),
        sa.Column("eager_ms", sa.Double(), nullable=True),
        sa.Column("compile_ms", sa.Double(), nullable=True),
        sa.Column("provenance", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_baselines")),
        sa.UniqueConstraint(
            "problem_sha256",
            "device",
            "provenance_key",
            name=op.f("uq_baselines_problem_sha256_device_provenance_key"),
        ),
    )
    op.create_table(
        "problems",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("bundled_id", sa.String(length=128), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("declarations", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_problems")),
        sa.UniqueConstraint("sha256", name=op.f("uq_problems_sha256")),
    )
    op.create_index(op.f("ix_problems_bundled_id"), "problems", ["bundled_id"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "kind",
            sa.Enum(
                "agent", "evaluation", name="job_kind", native_enum=False, create_constraint=True, length=32
            ),
            nullable=False,
        ),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("problem_id", sa.Integer(), nullable=False),
        sa.Column(
            "target",
            sa.Enum("cuda", "cpu", name="target", native_enum=False, create_constraint=True, length=32),
            nullable=False,
        ),
        sa.Column("candidate_source", sa.Text(), nullable=True),
        sa.Column("llm_profile", sa.String(length=64), nullable=True),
        sa.Column("llm_model", sa.String(length=128), nullable=True),
        sa.Column("budgets", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("trajectories_count", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column(
            "state",
            sa.Enum(
                "queued",
                "running",
                "succeeded",
                "failed",
                "cancelled",
                name="job_state",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("worker_id", sa.String(length=128), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("requeue_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("attempts_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("best_attempt_id", sa.Integer(), nullable=True),
        sa.Column("last_event_id", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("tokens_in", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("tokens_out", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_usd", sa.Double(), server_default=sa.text("0"), nullable=False),
        sa.Column("gpu_seconds", sa.Double(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["best_attempt_id"],
            ["attempts.id"],
            name=op.f("fk_jobs_best_attempt_id_attempts"),
            ondelete="SET NULL",
            use_alter=True,
        ),
        sa.ForeignKeyConstraint(["owner_id"], ["api_keys.id"], name=op.f("fk_jobs_owner_id_api_keys")),
        sa.ForeignKeyConstraint(["problem_id"], ["problems.id"], name=op.f("fk_jobs_problem_id_problems")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_created_at"), "jobs", ["created_at"])
    op.create_index(op.f("ix_jobs_owner_id"), "jobs", ["owner_id"])
    op.create_index(op.f("ix_jobs_problem_id"), "jobs", ["problem_id"])
    op.create_index("ix_jobs_state_target_id", "jobs", ["state", "target", "id"])
    op.create_table(
        "job_events",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("job_id", "id", name=op.f("pk_job_events")),
    )
    op.create_table(
        "trajectories",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("temperature", sa.Double(), nullable=True),
        sa.Column("strategy_hint", sa.Text(), nullable=True),
        sa.Column(
            "state",
            sa.Enum(
                "pending",
                "running",
                "submitted",
                "exhausted",
                "failed",
                "cancelled",
                name="trajectory_state",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("turns", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("tool_calls", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("messages_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("best_attempt_id", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["best_attempt_id"],
            ["attempts.id"],
            name=op.f("fk_trajectories_best_attempt_id_attempts"),
            ondelete="SET NULL",
            use_alter=True,
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_trajectories_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trajectories")),
        sa.UniqueConstraint("job_id", "index", name=op.f("uq_trajectories_job_id_index")),
    )
    op.create_table(
        "attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=32), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("verdict", sa.JSON(none_as_null=True), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "pass",
                "fail",
                "error",
                "suspicious",
                name="attempt_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("stage", sa.String(length=32), nullable=False),
        sa.Column(
            "error_kind",
            sa.Enum(
                "candidate",
                "infra",
                name="attempt_error_kind",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=True,
        ),
        sa.Column("correct", sa.Boolean(), nullable=False),
        sa.Column("median_ms", sa.Double(), nullable=True),
        sa.Column("speedup_vs_eager", sa.Double(), nullable=True),
        sa.Column("speedup_vs_compile", sa.Double(), nullable=True),
        sa.Column("pct_of_sol", sa.Double(), nullable=True),
        sa.Column("compile_s", sa.Double(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_attempts_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["attempts.id"], name=op.f("fk_attempts_parent_id_attempts"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_attempts_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_attempts")),
        sa.UniqueConstraint("job_id", "seq", name=op.f("uq_attempts_job_id_seq")),
    )
    op.create_index("ix_attempts_job_id_sha256", "attempts", ["job_id", "sha256"])
    op.create_index(op.f("ix_attempts_trajectory_id"), "attempts", ["trajectory_id"])
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trajectory_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("tool_calls", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("tool_call_id", sa.String(length=128), nullable=True),
        sa.Column("tokens_in", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("tokens_out", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("latency_ms", sa.Double(), nullable=True),
        sa.Column("cost_usd", sa.Double(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["trajectory_id"],
            ["trajectories.id"],
            name=op.f("fk_messages_trajectory_id_trajectories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
        sa.UniqueConstraint("trajectory_id", "seq", name=op.f("uq_messages_trajectory_id_seq")),
    )
    # jobs.best_attempt_id and trajectories.best_attempt_id point forward to attempts, which points
    # back at both. SQLite writes such keys inline in CREATE TABLE (use_alter; it checks them on
    # use, not on creation); PostgreSQL gets them here, once attempts exists.
    if op.get_bind().dialect.supports_alter:
        for table in _BEST_ATTEMPT_FKS:
            op.create_foreign_key(
                op.f(f"fk_{table}_best_attempt_id_attempts"),
                table,
                "attempts",
                ["best_attempt_id"],
                ["id"],
                ondelete="SET NULL",
            )


def downgrade() -> None:
    if op.get_bind().dialect.supports_alter:
        for table in _BEST_ATTEMPT_FKS:
            op.drop_constraint(op.f(f"fk_{table}_best_attempt_id_attempts"), table, type_="foreignkey")
    op.drop_table("messages")
    op.drop_index("ix_attempts_job_id_sha256", table_name="attempts")
    op.drop_index(op.f("ix_attempts_trajectory_id"), table_name="attempts")
    op.drop_table("attempts")
    op.drop_table("trajectories")
    op.drop_table("job_events")
    op.drop_index("ix_jobs_state_target_id", table_name="jobs")
    op.drop_index(op.f("ix_jobs_problem_id"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_owner_id"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_created_at"), table_name="jobs")
    op.drop_table("jobs")
    op.drop_index(op.f("ix_problems_bundled_id"), table_name="problems")
    op.drop_table("problems")
    op.drop_table("baselines")
    op.drop_index(op.f("ix_api_keys_owner"), table_name="api_keys")
    op.drop_table("api_keys")
