"""Starting and stopping the worker processes the integration tests run (not a test module)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from config import Settings
from tests.worker.support import REPO, settings_env


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_") or k.startswith("KERNELLOOP_TEST")}
    return {**env, **settings_env(settings), "PYTHONUNBUFFERED": "1"}


@contextmanager
def worker_process(argv: list[str], settings: Settings, log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A worker subprocess in its own process group, logging to ``log_path``; killed at the end."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(argv, cwd=REPO, env=_env(settings), stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def celery_worker_argv(name: str, queue: str = "cpu") -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "tests.worker.celery_entry", "worker", "-Q", queue, "-c", "1",
            "--pool", "solo", "-n", f"{name}@%h", "--loglevel", "INFO", "--without-gossip", "--without-mingle"]


def embedded_worker_argv() -> list[str]:
    return [sys.executable, "-m", "tests.worker.embedded_entry"]


def mapped_files(pid: int) -> str:
    """What a process has mapped (to see whether it loaded torch's libraries)."""
    return Path(f"/proc/{pid}/maps").read_text()
