"""Alembic environment for kernelloop's store (SQLite and PostgreSQL).

The database URL, first found wins: ``alembic -x url=…``; the config's ``sqlalchemy.url`` (set by
`store.migrate`); the ``KERNELLOOP_DATABASE_URL`` environment variable. A caller may instead hand
over an open connection in ``config.attributes["connection"]``.

Batch mode (``render_as_batch``) makes ``ALTER`` work on SQLite by rebuilding tables, which is
why every constraint is named (`store.models.NAMING_CONVENTION`) and why SQLite runs the
migrations with foreign keys off, checking them once at the end instead.
"""

from __future__ import annotations

import os
from typing import Any

from alembic import context
from sqlalchemy import Connection, text

from store.db import make_engine
from store.models import Base

URL_ENV = "KERNELLOOP_DATABASE_URL"

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise RuntimeError(f"no database URL: pass `-x url=...` or set {URL_ENV}")
    return url


def _configure(**kwargs: Any) -> None:
    context.configure(target_metadata=target_metadata, render_as_batch=True, compare_type=True, **kwargs)


def _check_sqlite_foreign_keys(connection: Connection) -> None:
    if connection.dialect.name != "sqlite":
        return
    broken = connection.execute(text("PRAGMA foreign_key_check")).fetchall()
    if broken:
        raise RuntimeError(f"foreign keys broken by the migration: {broken[:10]}")


def _run(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()
    _check_sqlite_foreign_keys(connection)


def run_migrations_offline() -> None:
    """``alembic upgrade --sql``: print the SQL instead of running it."""
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        _run(given)
        return
    engine = make_engine(_url(), sqlite_foreign_keys=False)
    try:
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
