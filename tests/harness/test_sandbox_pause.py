"""`harness.sandbox.paused_tree`: a sandbox's processes stopped while the trusted side measures the
host alone (the loop's calibration), continued after: what they spin cannot load the host then."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.sandbox import paused_tree
from tests.support.processes import descendants

#: A warden's stand-in (it only waits), with a child that spins in two threads and forks a
#: grandchild that spins too, then setsid()s: the whole tree stays under the root all the same.
_TREE = textwrap.dedent('''
    import os, sys, threading
    def spin():
        while True:
            pass
    if os.fork() == 0:
        threading.Thread(target=spin, daemon=True).start()
        if os.fork() == 0:
            os.setsid()
            spin()
        spin()
    os.wait()
''')


def _stat(pid: int) -> list[str]:
    return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def _state(pid: int) -> str:
    return _stat(pid)[0]


def _cpu_ticks(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.fixture
def spinning_tree() -> Iterator[subprocess.Popen[bytes]]:
    root = subprocess.Popen([sys.executable, "-c", _TREE], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(descendants(root.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        yield root
    finally:
        for pid in descendants(root.pid):  # before the root dies: orphans leave its tree
            os.kill(pid, 9)
        root.kill()
        root.wait()


def test_a_paused_tree_burns_no_cpu_and_runs_again_after(spinning_tree: subprocess.Popen[bytes]) -> None:
    tree = descendants(spinning_tree.pid)
    assert len(tree) == 2
    with paused_tree(spinning_tree.pid) as stopped:
        assert stopped and all(_state(pid) == "T" for pid in tree)
        before = [_cpu_ticks(pid) for pid in tree]
        time.sleep(0.5)
        assert [_cpu_ticks(pid) for pid in tree] == before
        assert _state(spinning_tree.pid) != "T"  # the warden runs on
    before = [_cpu_ticks(pid) for pid in tree]
    time.sleep(0.5)
    assert all(after > first for after, first in zip([_cpu_ticks(pid) for pid in tree], before, strict=True))


def test_a_tree_that_cannot_be_stopped_says_so(spinning_tree: subprocess.Popen[bytes],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Signals that never arrive (no permission): the caller learns the tree ran on (the patch
    is undone before the tree is killed: fixtures end in reverse order)."""
    monkeypatch.setattr("harness.sandbox._PAUSE_S", 0.2)
    monkeypatch.setattr("harness.sandbox.os.kill", lambda pid, sig: (_ for _ in ()).throw(PermissionError()))
    with paused_tree(spinning_tree.pid) as stopped:
        assert not stopped
