"""Model runs: a user's model optimised region by region (``kernelloop model optimize``, ``POST /models``).

``model_runs`` holds the model's source, its profile (regions, shares), its state and the whole
patched model's report; ``model_regions`` one row per selected region with its share and its job.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _enum(name: str, *values: str) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, create_constraint=True, length=32)


def upgrade() -> None:
    op.create_table(
        "model_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("model_source", sa.Text(), nullable=False),
        sa.Column("model_sha256", sa.String(length=64), nullable=False),
        sa.Column("target", _enum("target", "cuda", "cpu"), nullable=False),
        sa.Column("llm_profile", sa.String(length=64), nullable=True),
        sa.Column("llm_model", sa.String(length=128), nullable=True),
        sa.Column("budgets", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("profile", sa.JSON(none_as_null=True), nullable=False),
        sa.Column("state", _enum("model_run_state", "running", "applying", "succeeded", "failed", "cancelled"),
                  nullable=False),
        sa.Column("report", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["api_keys.id"], name=op.f("fk_model_runs_owner_id_api_keys")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_runs")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_model_runs_owner_id"), "model_runs", ["owner_id"])
    op.create_index(op.f("ix_model_runs_created_at"), "model_runs", ["created_at"])
    op.create_table(
        "model_regions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("share", sa.Double(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["model_run_id"], ["model_runs.id"], ondelete="CASCADE",
                                name=op.f("fk_model_regions_model_run_id_model_runs")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="SET NULL",
                                name=op.f("fk_model_regions_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_regions")),
        sa.UniqueConstraint("model_run_id", "name", name=op.f("uq_model_regions_model_run_id_name")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_model_regions_model_run_id"), "model_regions", ["model_run_id"])
    op.create_index(op.f("ix_model_regions_job_id"), "model_regions", ["job_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_model_regions_job_id"), table_name="model_regions")
    op.drop_index(op.f("ix_model_regions_model_run_id"), table_name="model_regions")
    op.drop_table("model_regions")
    op.drop_index(op.f("ix_model_runs_created_at"), table_name="model_runs")
    op.drop_index(op.f("ix_model_runs_owner_id"), table_name="model_runs")
    op.drop_table("model_runs")
