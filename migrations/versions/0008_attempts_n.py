"""An attempt's number is ``n`` everywhere: ``attempts.seq`` becomes ``attempts.n``, and its unique
constraint ``uq_attempts_job_id_seq`` becomes ``uq_attempts_job_id_n`` (the API always called it
``n``; ``seq`` stays the number of a message within its trajectory). The numbers are kept.

On PostgreSQL the column and the constraint (with its index) are renamed in place; on SQLite the
table is rebuilt (batch mode, keeping ``AUTOINCREMENT``).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rename(old: str, new: str) -> None:
    old_uq, new_uq = f"uq_attempts_job_id_{old}", f"uq_attempts_job_id_{new}"
    if op.get_bind().dialect.name != "sqlite":
        op.alter_column("attempts", old, new_column_name=new)
        op.execute(f"ALTER TABLE attempts RENAME CONSTRAINT {old_uq} TO {new_uq}")
        return
    with op.batch_alter_table("attempts", recreate="always", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_constraint(op.f(old_uq), type_="unique")
        batch.alter_column(old, new_column_name=new)
        # Batch mode keeps calling a renamed column by its old name (its key) until the rebuild.
        batch.create_unique_constraint(op.f(new_uq), ["job_id", old])


def upgrade() -> None:
    _rename("seq", "n")


def downgrade() -> None:
    _rename("n", "seq")
