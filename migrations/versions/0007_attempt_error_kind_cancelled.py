"""The error kind ``cancelled`` for attempts: an evaluation cut short by its job's stop (a cancel,
a budget, the wall clock) judged nothing, and is stored as such instead of as our failure
(``infra``) or the candidate's (issue 24). ``attempts.error_kind``'s ``CHECK`` constraint is
replaced on both backends (on SQLite the table is rebuilt, keeping ``AUTOINCREMENT``).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECK = "ck_attempts_attempt_error_kind"
_OLD_KINDS = ("candidate", "infra", "problem")
_NEW_KINDS = ("candidate", "infra", "problem", "cancelled")


def _kinds_check(kinds: Sequence[str]) -> str:
    return "error_kind IN (" + ", ".join(f"'{k}'" for k in kinds) + ")"


def _replace_check(kinds: Sequence[str]) -> None:
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint(op.f(_CHECK), "attempts", type_="check")
        op.create_check_constraint("attempt_error_kind", "attempts", _kinds_check(kinds))
        return
    with op.batch_alter_table("attempts", recreate="always", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_constraint(op.f(_CHECK), type_="check")
        batch.create_check_constraint("attempt_error_kind", sa.text(_kinds_check(kinds)))


def upgrade() -> None:
    _replace_check(_NEW_KINDS)


def downgrade() -> None:
    # Before this kind existed, a cut-short evaluation was stored as ours.
    op.execute("UPDATE attempts SET error_kind = 'infra' WHERE error_kind = 'cancelled'")
    _replace_check(_OLD_KINDS)
