"""A client command (``jobs``, ``watch``, ``submit``, ``cancel``, …) starts without the server's
packages: importing ``cli.main`` loads neither the referee, the store, the settings nor torch;
the commands that use them import them when they run. Before, every command imported the store,
SQLAlchemy, Alembic and the harness (0.9 CPU-s a command on the 2-core machine; 0.35 since), and
a script calling ``kernelloop`` in a loop paid for them each time."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import REPO

#: What a command that only talks to the API never needs.
SERVER_SIDE = {"torch", "harness", "store", "config", "api", "worker", "agent", "sqlalchemy", "alembic", "celery",
               "pydantic_settings", "uvicorn", "fastapi"}


def test_the_command_line_loads_no_server_package_until_a_command_needs_one() -> None:
    code = "import sys, cli.main; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, check=True).stdout.split()
    assert SERVER_SIDE & set(loaded) == set()
    assert {"cli", "typer", "vocabulary"} <= set(loaded)  # it did import the command line
