"""Reasoning and cached-prompt tokens recorded apart: per message (nullable: unknown for messages
stored before, and for servers that report neither) and in each job's totals.

Revision ID: 0004
Revises: 0002 (0003 is written on another branch; this one is re-chained after it at merge)
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("tokens_reasoning", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("tokens_cached", sa.Integer(), nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("tokens_reasoning", sa.Integer(), nullable=False, server_default=sa.text("0")))
        batch.add_column(sa.Column("tokens_cached", sa.Integer(), nullable=False, server_default=sa.text("0")))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("tokens_cached")
        batch.drop_column("tokens_reasoning")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("tokens_cached")
        batch.drop_column("tokens_reasoning")
