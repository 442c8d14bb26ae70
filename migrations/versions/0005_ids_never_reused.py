"""Ids never reused on SQLite (AUTOINCREMENT), and the error kind ``problem`` for attempts.

On SQLite an ``INTEGER PRIMARY KEY`` without ``AUTOINCREMENT`` hands the id of the newest deleted
row out again: a client holding a deleted job's id would read someone else's job. Every table with
a surrogate id is rebuilt (batch mode) with ``AUTOINCREMENT``; the ids it holds are kept.
PostgreSQL identities never reuse a value: its tables are left as they are.

``attempts.error_kind`` gains ``problem`` (the problem's own code failed; issue 13) on both
backends: its ``CHECK`` constraint is replaced.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Tables whose ``id`` is a surrogate key handed out by the database (job_events numbers its own).
_TABLES = ("api_keys", "problems", "jobs", "trajectories", "messages", "attempts", "baselines")
_CHECK = "ck_attempts_attempt_error_kind"
_OLD_KINDS = ("candidate", "infra")
_NEW_KINDS = ("candidate", "infra", "problem")


def _kinds_check(kinds: Sequence[str]) -> str:
    return "error_kind IN (" + ", ".join(f"'{k}'" for k in kinds) + ")"


def _rebuild(autoincrement: bool, kinds: Sequence[str]) -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    if not sqlite:
        op.drop_constraint(op.f(_CHECK), "attempts", type_="check")
        op.create_check_constraint("attempt_error_kind", "attempts", _kinds_check(kinds))
        return
    for table in _TABLES:
        with op.batch_alter_table(table, recreate="always",
                                  table_kwargs={"sqlite_autoincrement": autoincrement}) as batch:
            if table == "attempts":
                batch.drop_constraint(op.f(_CHECK), type_="check")
                batch.create_check_constraint("attempt_error_kind", sa.text(_kinds_check(kinds)))


def upgrade() -> None:
    _rebuild(True, _NEW_KINDS)


def downgrade() -> None:
    # An attempt the problem's code failed was ours to report before this kind existed.
    op.execute("UPDATE attempts SET error_kind = 'infra' WHERE error_kind = 'problem'")
    _rebuild(False, _OLD_KINDS)
