"""``kernelloop optimize`` under a pseudo-terminal (120 x 40), asserting what a person sees.

The real run uses a fresh cache whose builds are hard links to the session's (no compile here),
but whose baselines are empty: the reference's start and the eager / torch.compile timing run as
a person's first optimize of a problem would, and the screen must say so while they run. (The
header build, minutes on two cores, is shown by the same view in tests/cli/test_view.py
with a fake slow stage.)
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from agent.providers.scripted import script_for
from tests.support.cli import QUICK_TIMING_ENV
from tests.support.paths import REPO

COLUMNS, ROWS = 120, 40
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def run_in_pty(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run ``kernelloop args`` with a pseudo-terminal as its stdin, stdout and stderr; returns its
    exit code and everything it drew, escape sequences removed (every frame of a live view)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    process = subprocess.Popen([sys.executable, "-m", "cli.main", *args], stdin=slave, stdout=slave, stderr=slave,
                               cwd=cwd, env=env, close_fds=True, start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                process.kill()
                raise AssertionError("timed out; it drew:\n" + _plain(b"".join(chunks))[-4000:])
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every end of the terminal's other side is closed
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    return process.wait(timeout=60), _plain(b"".join(chunks))


def _plain(raw: bytes) -> str:
    return _ANSI.sub("", raw.decode("utf-8", errors="replace")).replace("\r\n", "\n").replace("\r", "\n")


def _env(tmp_path: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")}
    # No header warm-up: the cache is the test's own, so what it built would be thrown away.
    return {**env, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": str(COLUMNS),
            "LINES": str(ROWS), "KERNELLOOP_DATA_DIR": str(tmp_path / "data"), "KERNELLOOP_CACHE_DIR": str(cache),
            "KERNELLOOP_WARM_HEADERS": "false", **QUICK_TIMING_ENV}


def test_scripted_without_a_script_is_refused_in_words(tmp_path: Path) -> None:
    code, screen = run_in_pty(["optimize", "level3/mlp", "--llm", "scripted", "--target", "cpu"], cwd=tmp_path,
                              env=_env(tmp_path, tmp_path / "cache"), timeout=120)
    assert code == 2, screen
    assert "Traceback" not in screen and "NoScript" not in screen
    flat = " ".join(screen.split())
    assert "the scripted LLM has no script for level3/mlp on cpu; it has scripts for level1/argmax" in flat
    assert not (tmp_path / "data").exists()  # refused before any job was created


@pytest.mark.slow
def test_optimize_shows_stages_attempts_and_a_plain_summary(tmp_path: Path, harness_cache: Path) -> None:
    problem = "level1/argmax"
    cache = tmp_path / "cache"
    shutil.copytree(harness_cache / "builds", cache / "builds", copy_function=os.link)  # no compile, cold baselines
    code, screen = run_in_pty(["optimize", problem, "--llm", "scripted", "--target", "cpu"], cwd=tmp_path,
                              env=_env(tmp_path, cache), timeout=1500)
    lines = screen.splitlines()
    assert code == 0, screen[-6000:]
    # What runs once per problem is shown while it runs, with a clock, then kept as a step.
    assert re.search(r"now: timing eager PyTorch and torch\.compile \(once per problem\)\s+\d+\.\d s …", screen), \
        screen[-6000:]
    assert re.search(r"✓ starting the reference \(problem, expected outputs\)\s+\d", screen)
    assert re.search(r"✓ timing eager PyTorch and torch\.compile \(once per problem\)\s+\d", screen)
    assert re.search(r"now: (checking correctness|timing the candidate|loading the candidate)", screen)
    # The attempts table and its budgets, redrawn in place; the baselines' milliseconds over the
    # ratios they are the bases of (issue 24).
    assert f"· {problem} · cpu ·" in screen and "median" in screen and "vs compile" in screen
    assert re.search(r"vs eager\s+vs compile\s*\n.*\s[\d.]+ ms\s+[\d.]+ ms", screen), screen[-6000:]
    assert re.search(r"turns \d+ / 10 · tool calls \d+ / 30", screen)
    # Never a payload as it came, never a line longer than the terminal.
    assert not re.search(r"\{'|\{\"|': ", screen), screen[-6000:]
    assert all(len(line) <= COLUMNS for line in lines)
    # The agent's words: whole, or cut after a whole word with an ellipsis.
    turns, _ = script_for(problem, "cpu")
    said = [" ".join(t.content.split()) for t in turns]
    shown = [line.split("agent: ", 1)[1].rstrip() for line in lines if line.startswith("agent: ")]
    assert shown, screen[-6000:]
    for words in shown:
        if words.endswith("…"):
            kept = words[:-1]
            assert any(s.startswith(kept) and s[len(kept)] in " ,;:-" for s in said), words
        else:
            assert words in said, words
    # The summary says plainly how it compares, and where to look.
    flat = " ".join(screen.split())
    assert re.search(r"best: attempt \d+, [\d.]+ ms, [\d.]+× vs eager \([\d.]+ ms\), [\d.]+× vs torch\.compile "
                     r"\([\d.]+ ms\)", flat), flat[-3000:]
    # Said plainly, with the milliseconds: "Nothing beat eager PyTorch or torch.compile: …" when so.
    assert re.search(r"(Nothing beat eager PyTorch|It beats (eager PyTorch|torch\.compile)).*attempt \d+ takes [\d.]+ "
                     r"ms; eager PyTorch [\d.]+ ms \([\d.]+×\)", flat), flat[-3000:]
    assert "`kernelloop replay 1`" in flat and "/dashboard/jobs/1" in flat
    assert "Traceback" not in screen
