"""Small SQL helpers shared by the data-access modules (private to `store`)."""

from __future__ import annotations

import json
import math
from typing import Any

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from store.errors import NotFound

__all__ = [
    "bump_counter",
    "dialect_name",
    "dumps_json",
    "insert_ignoring_conflicts",
    "write_row",
]


def dialect_name(session: Session) -> str:
    return session.get_bind().dialect.name


def insert_ignoring_conflicts(session: Session, model: type[Any]) -> Any:
    """``INSERT … ON CONFLICT DO NOTHING`` for the session's backend (PostgreSQL or SQLite)."""
    name = dialect_name(session)
    if name == "postgresql":
        return postgresql.insert(model)
    if name == "sqlite":
        return sqlite.insert(model)
    raise NotImplementedError(f"the store supports PostgreSQL and SQLite, not {name}")


def write_row(session: Session, model: type[Any], row_id: int, stmt: Any) -> Any | None:
    """Run an ``UPDATE``/``DELETE … RETURNING`` aimed at one row and return the returned value
    (``None`` when its guard matched no row).

    A loaded copy of the row is expired after an ``UPDATE``, so the next attribute read reloads it
    within the same transaction (more predictable than ``synchronize_session`` guessing from a
    statement with subqueries); after a ``DELETE`` that removed the row it leaves the session,
    keeping the values it had.
    """
    value = session.execute(stmt.execution_options(synchronize_session=False)).scalar_one_or_none()
    loaded = session.identity_map.get(identity_key(model, row_id))
    if loaded is not None:
        if stmt.is_delete:
            if value is not None:
                session.expunge(loaded)
        else:
            session.expire(loaded)
    return value


def bump_counter(
    session: Session,
    model: type[Any],
    row_id: int,
    counter: InstrumentedAttribute[int],
    **also: Any,
) -> int:
    """Add one to ``counter`` of one row and return the new value, in a single ``UPDATE … RETURNING``.

    The statement takes the row's write lock (PostgreSQL) or the database's (SQLite) until the
    transaction ends, so two transactions never get the same number and numbers become visible
    in the order they were handed out. ``also`` adds more column values to the same statement.

    A loaded copy of the row gets the new counter as its committed value and has only ``also``'s
    attributes expired, rather than the whole row (`write_row`): a caller that goes on reading the
    row (the API answering with the job it just created) needs no second ``SELECT``.

    Raises:
        NotFound: no row with that id.
    """
    stmt = update(model).where(model.id == row_id).values({counter: counter + 1, **also}).returning(counter)
    value = session.execute(stmt.execution_options(synchronize_session=False)).scalar_one_or_none()
    if value is None:
        raise NotFound(model.__tablename__.rstrip("s"), row_id)
    loaded = session.identity_map.get(identity_key(model, row_id))
    if loaded is not None:
        set_committed_value(loaded, counter.key, value)
        if also:
            session.expire(loaded, list(also))
    return int(value)


def _sanitize(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize(v) for v in value]
    return value


def dumps_json(value: Any) -> str:
    """Serialise a JSON column. NaN and ±inf become ``null``, as the verdict types already do:
    PostgreSQL's ``json`` refuses them, and a timing sample must not lose a whole verdict."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_sanitize(value), allow_nan=False)
