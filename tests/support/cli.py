"""Running the ``kernelloop`` commands as a user runs them (a subprocess, its own environment, wide
output): ``python -m cli.client`` by default, the whole ``kernelloop`` with ``program=KERNELLOOP``;
and a real ``kernelloop up`` (API + embedded worker, SQLite, no Redis). Stdlib only: the GPU
service test starts ``kernelloop up --target cuda`` with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.network import free_port, wait_healthy
from tests.support.paths import REPO

if TYPE_CHECKING:
    from tests.support.dashboard import Service

#: ``python -m`` targets: the client commands alone, or the whole ``kernelloop`` command.
CLIENT = "cli.client"
KERNELLOOP = "cli.main"
#: The console script `pip install` made beside this interpreter: what a user types.
KERNELLOOP_COMMAND = Path(sys.executable).with_name("kernelloop")


def pythonpath() -> str:
    """The repository first, then whatever the caller had (the GPU box brings packages that way)."""
    return os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)


#: Timed runs of 0.3 s (`config.Settings.timing_max_s`, default 2 s) for the service's
#: jobs and the CLI's local judging: these tests check what the commands do and say, the figures'
#: precision is the harness tests' (tests/harness).
QUICK_TIMING_ENV = {"KERNELLOOP_TIMING_MAX_S": "0.3"}


def api_env(base_url: str, key: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a client command: the API's URL and key, a private HOME (so no real
    config file is read), a wide terminal for the tables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_API")}
    env.update(
        PYTHONPATH=pythonpath(), HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), COLUMNS="200",
        KERNELLOOP_API_URL=base_url, KERNELLOOP_API_KEY=key, **QUICK_TIMING_ENV,
    )
    env.update(extra)
    return env


def client_env(service: Service, home: Path, **extra: str) -> dict[str, str]:
    return api_env(service.base_url, service.key, home, **extra)


def start(args: Sequence[str], env: dict[str, str], cwd: Path, *, program: str = CLIENT) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", program, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )


def run(
    args: Sequence[str], env: dict[str, str], cwd: Path, timeout: float = 120, *, program: str = CLIENT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", program, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )


@dataclass(frozen=True)
class Embedded:
    """A running ``kernelloop up``: its URL, an API key made by ``kernelloop keys create``, its log."""

    base_url: str
    key: str
    log: Path

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


@contextmanager
def kernelloop_up(tmp_path: Path, harness_cache: Path, target: str) -> Iterator[Embedded]:
    """``kernelloop up --target TARGET`` on a free port with a temporary data directory and the
    shared harness cache (builds and torch.compile artifacts reused across tests and runs); stopped
    with Ctrl-C (SIGINT) at the end, which stops its worker too."""
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_") or k.startswith("KERNELLOOP_TEST")}
    env.update(PYTHONPATH=pythonpath(), HOME=str(tmp_path / "server-home"),
               KERNELLOOP_DATA_DIR=str(data), KERNELLOOP_CACHE_DIR=str(harness_cache),
               KERNELLOOP_POLL_INTERVAL_S="0.1", **QUICK_TIMING_ENV)
    if target == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    created = run(["keys", "create", "--name", "ci"], env, tmp_path, program=KERNELLOOP)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip().splitlines()[-1]
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    log = tmp_path / "up.log"
    with log.open("wb") as sink:
        up = subprocess.Popen([sys.executable, "-m", KERNELLOOP, "up", "--port", str(port), "--target", target],
                              cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT)
    running = Embedded(base_url=base_url, key=key, log=log)
    try:
        wait_healthy(base_url, up, log)
        yield running
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
