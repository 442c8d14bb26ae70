"""``kernelloop up`` and ``serve --workers`` started the way a user starts them: the installed
``kernelloop`` command, from a folder of their own.

Issue 24: run from a folder holding ``config/`` and ``problems/`` (one's own problems live there),
the worker ``up`` started died at import (``python -m`` put that folder first on ``sys.path``:
``ImportError: cannot import name 'Settings' from 'config'``) and was restarted every 2 s forever
while ``up`` said "kernelloop is up". Now every child runs ``python -P``; and a worker that cannot
start says why, once, and ``up`` exits 1 without claiming to be up.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.cli import KERNELLOOP_COMMAND, pythonpath
from tests.support.network import free_port, wait_healthy
from tests.support.waiting import wait_for

#: A candidate the compile stage rejects at once (it raises at import): a job that runs in seconds.
RAISES_AT_IMPORT = "import torch.nn as nn\nraise RuntimeError('not today')\n\nclass ModelNew(nn.Module):\n    pass\n"


def _users_folder(tmp_path: Path) -> Path:
    """A folder as a user has one: their own ``config`` package and ``problems``, with
    ``XDG_CONFIG_HOME`` pointing at it."""
    folder = tmp_path / "work"
    (folder / "config").mkdir(parents=True)
    (folder / "config" / "__init__.py").write_text("DEBUG = True\n")
    (folder / "problems").mkdir()
    (folder / "problems" / "__init__.py").write_text("")
    (folder / "problems" / "mine.py").write_text("# my own problem\n")
    return folder


def _env(tmp_path: Path, cache: Path, folder: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_") or k.startswith("KERNELLOOP_TEST")}
    env.update(PYTHONPATH=pythonpath(), HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(folder),
               KERNELLOOP_DATA_DIR=str(tmp_path / "data"), KERNELLOOP_CACHE_DIR=str(cache),
               KERNELLOOP_POLL_INTERVAL_S="0.1", KERNELLOOP_WARM_HEADERS="false", CUDA_VISIBLE_DEVICES="", **extra)
    return env


@contextmanager
def _running(argv: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _http(method: str, url: str, key: str, body: dict[str, object] | None = None) -> dict[str, object]:
    # The key as a bearer token, as most HTTP clients send it (issue 24: refused before).
    request = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


def test_up_from_a_folder_holding_config_and_problems_runs_jobs(tmp_path: Path, harness_cache: Path) -> None:
    folder = _users_folder(tmp_path)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "up.log"
    env = _env(tmp_path, harness_cache, folder)
    with _running([str(KERNELLOOP_COMMAND), "up", "--port", str(port), "--target", "cpu"], cwd=folder, env=env,
                  log=log) as up:
        wait_healthy(base, up, log, timeout=180)
        key = (tmp_path / "data" / "local-api-key").read_text().strip()
        job = _http("POST", f"{base}/evaluations", key,
                    {"problem_id": "level1/softmax", "target": "cpu", "candidate_source": RAISES_AT_IMPORT})
        # The worker takes it and runs it: the candidate's own failure is the job's only verdict.
        finished = wait_for(lambda: (lambda j: j if j["state"] not in ("queued", "running") else None)(
            _http("GET", f"{base}/jobs/{job['id']}", key)), timeout=180, interval=0.5, what="the job to finish")
        assert finished["state"] == "succeeded", (finished, log.read_text()[-3000:])
        text = log.read_text(errors="replace")
        assert "ImportError" not in text and "restarting" not in text, text[-3000:]
        assert "worker cpu started" in text


def test_a_worker_that_cannot_start_says_why_once_and_up_exits_1(tmp_path: Path) -> None:
    folder = _users_folder(tmp_path)
    # A setting only the worker checks: every worker would die at its start.
    env = _env(tmp_path, tmp_path / "cache", folder, KERNELLOOP_HEARTBEAT_SECONDS="100")
    started = time.monotonic()
    done = subprocess.run([str(KERNELLOOP_COMMAND), "up", "--port", str(free_port()), "--target", "cpu"], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=240)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, done.stderr
    assert said.count("KERNELLOOP_HEARTBEAT_SECONDS (100.0) must be positive and at most half") == 1, done.stderr
    assert "worker cpu could not start: ValueError:" in said
    assert "kernelloop is up" not in said and "restarting" not in said and "Traceback" not in said
    assert "kernelloop is not up" in said
    assert time.monotonic() - started < 200


def test_a_second_up_on_a_busy_port_says_so_before_doing_anything(tmp_path: Path) -> None:
    folder = _users_folder(tmp_path)
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        done = subprocess.run([str(KERNELLOOP_COMMAND), "up", "--port", str(port), "--target", "cpu"], cwd=folder,
                              env=_env(tmp_path, tmp_path / "cache", folder), capture_output=True, text=True,
                              timeout=120)
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in said and f"--port {port + 1}" in said, said
    # Nothing was migrated, no worker started, no banner.
    assert "migrating" not in said and "worker" not in said and "kernelloop is up" not in said
    assert not (tmp_path / "data").exists()


def test_serve_with_workers_from_a_folder_holding_config(tmp_path: Path) -> None:
    folder = _users_folder(tmp_path)
    port = free_port()
    log = tmp_path / "serve.log"
    env = _env(tmp_path, tmp_path / "cache", folder)
    (tmp_path / "data").mkdir()
    with _running([str(KERNELLOOP_COMMAND), "serve", "--workers", "2", "--port", str(port)], cwd=folder, env=env,
                  log=log) as serve:
        wait_healthy(f"http://127.0.0.1:{port}", serve, log, timeout=120)
        # The first process may answer /health before the second has started (a loaded host: seen once).
        deadline = time.monotonic() + 120
        while "API process 2/2 started" not in (text := log.read_text(errors="replace")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "API process 1/2 started" in text and "API process 2/2 started" in text, text
        assert "ImportError" not in text and "restarting" not in text, text
