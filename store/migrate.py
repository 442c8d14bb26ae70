"""Run the Alembic migrations programmatically (``kernelloop up``, tests, the compose service).

The scripts live in ``migrations/`` beside this package; ``alembic.ini`` at the repository root
points the ``alembic`` command at the same folder, so ``alembic -x url=… upgrade head`` and
`upgrade` do the same thing.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import URL

from store.db import make_engine, normalize_url

__all__ = ["MIGRATIONS_DIR", "alembic_config", "current_revision", "downgrade", "upgrade"]

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str | URL) -> Config:
    """An Alembic config for ``url`` without reading ``alembic.ini`` (no logging set-up either)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ``%`` is ConfigParser's interpolation character; escape it in passwords.
    rendered = normalize_url(url).render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return config


def upgrade(url: str | URL, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision``."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | URL, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``"base"`` drops everything)."""
    command.downgrade(alembic_config(url), revision)


def current_revision(url: str | URL) -> str | None:
    """The revision the database is at; ``None`` for an empty database."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
