"""Ports and health checks for tests that start a server (stdlib only)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on: the socket that found it is closed again, so a
    server may bind it, and until one does a client is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(base_url: str, timeout: float = 2) -> bool:
    """Whether ``base_url``'s ``/health`` answers 200."""
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def wait_healthy(base_url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    """Wait until the server ``process`` started answers ``/health``; fails with its ``log`` if it
    exits first or takes longer than ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not healthy(base_url):
        assert process.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, log.read_text(errors="replace")
        time.sleep(0.3)
