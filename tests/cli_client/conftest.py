"""Fixtures for the client commands: the live API of `tests.dashboard.support`, and a runner of
``python -m cli.client`` as a user runs it (a subprocess, its own environment, wide output)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.dashboard.support import REPO, Service, live_service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with live_service(tmp_path / "service") as running:
        yield running


def client_env(service: Service, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a client command: the service's URL and key, a private HOME (so no real
    config file is read), a wide terminal for the tables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_API")}
    env.update(
        PYTHONPATH=str(REPO), HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), COLUMNS="200",
        KERNELLOOP_API_URL=service.base_url, KERNELLOOP_API_KEY=service.key, **extra,
    )
    return env


def start(args: Sequence[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.client", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )


def run(args: Sequence[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.client", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )
