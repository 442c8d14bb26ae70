"""``kernelloop keys``: issue, list and revoke API keys in the service's database.

Each command reads the settings (``KERNELLOOP_DATABASE_URL`` …), migrates the database to the
latest schema, then acts. A new key's plaintext goes to stdout alone (``KEY=$(kernelloop keys
create --name ci)``), everything else to stderr; only its SHA-256 is stored.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from cli.client.columns import Column, plain_columns
from cli.common import HELP_STYLE
from vocabulary.budgets import DEFAULT_MAX_CONCURRENT_JOBS, DEFAULT_MAX_JOBS_PER_DAY
from vocabulary.wire import JsonObject

# The store and the settings are imported by the commands that use them: `cli.main` registers
# this app for every command, `kernelloop watch` included, which needs neither.
if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from config import Settings
    from store import ApiKey

__all__ = ["LocalKey", "ensure_local_key", "keys_app"]

keys_app = typer.Typer(help="Manage API keys (the plaintext is shown once, at creation).", no_args_is_help=True,
                       **HELP_STYLE)

_err = Console(stderr=True)
_out = Console()


@contextmanager
def _session(settings: Settings | None = None) -> Iterator[Session]:
    from config import load_settings
    from store import make_engine, make_session_factory, session_scope
    from store.migrate import upgrade

    settings = settings or load_settings()
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url
    upgrade(url)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            yield session
    finally:
        engine.dispose()


#: The name of the local user's key (in `Settings.local_key_path`, inside the data directory:
#: private to the service, hidden from every sandbox).
LOCAL_KEY_NAME = "local"


@dataclass(frozen=True)
class LocalKey:
    """The key of whoever runs ``up`` and ``optimize`` on this machine: the owner of optimize's
    jobs, the key the CLI sends to a local API when given none, the one to sign in to the dashboard."""

    key_id: int
    plaintext: str
    path: Path
    created: bool


def ensure_local_key(settings: Settings) -> LocalKey:
    """The local key of this data directory's service: the one in `LOCAL_KEY_FILE` while it is
    live, else a new one (written there, readable by this user only).

    With a database on this machine (SQLite, as ``kernelloop up`` keeps it) the key is the
    machine owner's and an admin: it sees every job of this service, those of keys made with
    ``keys create`` too (whoever can read the data directory can read the database file anyway).
    With a database server (PostgreSQL: a shared deployment) it is a plain key, confined to its
    own jobs like every other."""
    from store import create_api_key, set_api_key_admin, verify_api_key

    path = settings.local_key_path
    saved = path.read_text().strip() if path.is_file() else ""
    owns_the_database = settings.database_is_local
    with _session(settings) as session:
        key = verify_api_key(session=session, plaintext=saved) if saved else None
        if key is not None:
            if key.is_admin != owns_the_database:  # made by a version that made it a plain key
                set_api_key_admin(session=session, api_key_id=key.id, is_admin=owns_the_database)
            return LocalKey(key_id=key.id, plaintext=saved, path=path, created=False)
        owner = getpass.getuser()
        issued = create_api_key(session=session, name=LOCAL_KEY_NAME, owner=owner, is_admin=owns_the_database,
                                max_concurrent_jobs=DEFAULT_MAX_CONCURRENT_JOBS,
                                max_jobs_per_day=DEFAULT_MAX_JOBS_PER_DAY, cost_cap_usd=None)
        key_id = issued.key.id
    path.parent.mkdir(parents=True, exist_ok=True)  # with a configured database, nothing made it yet
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(issued.plaintext + "\n")
    scratch.chmod(0o600)
    os.replace(scratch, path)
    return LocalKey(key_id=key_id, plaintext=issued.plaintext, path=path, created=True)


def _row(key: ApiKey) -> JsonObject:
    return {
        "id": key.id,
        "name": key.name,
        "owner": key.owner,
        "prefix": key.key_prefix,
        "admin": key.is_admin,
        "max_concurrent_jobs": key.max_concurrent_jobs,
        "max_jobs_per_day": key.max_jobs_per_day,
        "cost_cap_usd": key.cost_cap_usd,
        "created_at": key.created_at.isoformat(),
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


@keys_app.command("create")
def create(
    name: Annotated[str, typer.Option("--name", help="a label, e.g. \"alice's laptop\"")],
    owner: Annotated[str | None, typer.Option(help="who the key belongs to (default: the name)")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="sees and manages every key's jobs")] = False,
    max_concurrent: Annotated[
        int, typer.Option("--max-concurrent", min=1, help="jobs queued or running at once")
    ] = DEFAULT_MAX_CONCURRENT_JOBS,
    max_per_day: Annotated[
        int, typer.Option("--max-per-day", min=1, help="jobs created per rolling 24 hours")
    ] = DEFAULT_MAX_JOBS_PER_DAY,
    cost_cap: Annotated[
        float | None, typer.Option("--cost-cap", min=0.0, help="USD of LLM cost over all its jobs (default: none)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the key and its limits as one JSON object")] = False,
) -> None:
    """Create a key and print it (once: only its hash is kept)."""
    from store import create_api_key

    with _session() as session:
        issued = create_api_key(
            session=session,
            name=name,
            owner=owner or name,
            is_admin=admin,
            max_concurrent_jobs=max_concurrent,
            max_jobs_per_day=max_per_day,
            cost_cap_usd=cost_cap,
        )
        key_id = issued.key.id
        row = _row(issued.key)
    _err.print(
        f"created key {key_id} ({name}{', admin' if admin else ''}); store it now, it is not shown again:"
    )
    sys.stdout.write((json.dumps({**row, "key": issued.plaintext}) if as_json else issued.plaintext) + "\n")


@keys_app.command("list")
def list_keys(
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table")] = False,
    revoked: Annotated[bool, typer.Option("--revoked", help="include revoked keys")] = False,
) -> None:
    """List keys (prefixes only; the keys themselves are not stored)."""
    from sqlalchemy import select

    from store import ApiKey

    with _session() as session:
        stmt = select(ApiKey).order_by(ApiKey.id)
        if not revoked:
            stmt = stmt.where(ApiKey.revoked_at.is_(None))
        rows = [_row(k) for k in session.scalars(stmt)]
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
        return
    header = ["ID", "NAME", "OWNER", "PREFIX", "ADMIN", "JOBS AT ONCE", "JOBS PER DAY", "COST CAP", "CREATED"]
    columns = [Column(name) for name in header + (["REVOKED"] if revoked else [])]
    lines: list[list[str]] = []
    for r in rows:
        cells = [str(r["id"]), str(r["name"]), str(r["owner"]), f"{r['prefix']}…", "yes" if r["admin"] else "no",
                 str(r["max_concurrent_jobs"]), str(r["max_jobs_per_day"]),
                 "none" if r["cost_cap_usd"] is None else f"${r['cost_cap_usd']:g}",
                 str(r["created_at"])[:16].replace("T", " ")]
        if revoked:
            cells.append(str(r["revoked_at"] or "")[:16].replace("T", " ") or "no")
        lines.append(cells)
    # Plain columns on a terminal too, nothing cut (a narrow terminal wraps the lines, as ``ps`` does).
    sys.stdout.write(plain_columns(columns, lines))
    if not rows:
        _err.print("no keys yet: `kernelloop keys create --name NAME` makes one")


@keys_app.command("revoke")
def revoke(key_id: Annotated[int, typer.Argument(help="the key's id (see `kernelloop keys list`)")]) -> None:
    """Revoke a key: it stops working at once; its jobs stay."""
    from store import NotFound, revoke_api_key

    try:
        with _session() as session:
            key = revoke_api_key(session=session, api_key_id=key_id)
            name = key.name
    except NotFound:
        _err.print(f"[red]error:[/red] no API key with id {key_id} (see `kernelloop keys list`)")
        raise typer.Exit(1) from None
    _err.print(f"revoked key {key_id} ({name})")
