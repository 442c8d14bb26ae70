"""``kernelloop keys``: create (shown once), list, revoke, on the settings' database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.keys import keys_app
from store import make_engine, make_session_factory, session_scope, verify_api_key


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"KERNELLOOP_DATABASE_URL": f"sqlite:///{tmp_path / 'keys.db'}", "KERNELLOOP_DATA_DIR": str(tmp_path)}


def _verify(env: dict[str, str], plaintext: str) -> bool:
    engine = make_engine(env["KERNELLOOP_DATABASE_URL"])
    try:
        with session_scope(make_session_factory(engine)) as session:
            return verify_api_key(session=session, plaintext=plaintext) is not None
    finally:
        engine.dispose()


def test_create_list_revoke(env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    runner = CliRunner()
    created = runner.invoke(
        keys_app, ["create", "--name", "ci", "--admin", "--max-concurrent", "4", "--cost-cap", "20"], env=env
    )
    assert created.exit_code == 0, created.output
    plaintext = created.stdout.strip().splitlines()[-1]
    assert plaintext.startswith("kl_") and _verify(env, plaintext)

    listed = runner.invoke(keys_app, ["list", "--json"], env=env)
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 1
    row = rows[0]
    assert (row["name"], row["admin"], row["max_concurrent_jobs"], row["cost_cap_usd"]) == ("ci", True, 4, 20.0)
    assert plaintext.startswith(row["prefix"]) and plaintext not in listed.stdout

    revoked = runner.invoke(keys_app, ["revoke", str(row["id"])], env=env)
    assert revoked.exit_code == 0, revoked.output
    assert not _verify(env, plaintext)
    assert runner.invoke(keys_app, ["list", "--json"], env=env).stdout.strip() == ""
    assert len(runner.invoke(keys_app, ["list", "--json", "--revoked"], env=env).stdout.splitlines()) == 1

    missing = runner.invoke(keys_app, ["revoke", "999"], env=env)
    assert missing.exit_code == 1 and "no API key with id 999" in missing.output
