"""What runs on this machine, read from ``/proc``: sandboxes, processes by their command
line, what a process mapped (stdlib only)."""

from __future__ import annotations

import os
from pathlib import Path


def _parents() -> dict[int, tuple[int, str]]:
    """Every process's parent and state, from one pass over /proc."""
    found: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(entry)] = (int(fields[1]), fields[0])
    return found


def descendants(root_pid: int, parents: dict[int, tuple[int, str]] | None = None) -> list[int]:
    """Every descendant of ``root_pid``, zombies too (``parents``: a `_parents` already read)."""
    parents = _parents() if parents is None else parents
    tree: list[int] = []
    frontier = {root_pid}
    while frontier:
        frontier = {pid for pid, (parent, _) in parents.items() if parent in frontier and pid not in tree}
        tree += frontier
    return tree


def sandbox_processes(root_pid: int | None = None, role: str | None = None) -> list[int]:
    """Live sandbox processes (wardens and roles; only ``role``'s sandbox when given) descending
    from ``root_pid`` (default: us)."""
    states = _parents()
    wanted = (f"harness.sandboxed.roles {role} ",) if role else ("harness.sandboxed.roles", "warden.py")
    found = []
    for pid in descendants(root_pid or os.getpid(), states):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if states.get(pid, (0, "Z"))[1] != "Z" and any(w in command for w in wanted):
            found.append(pid)
    return found


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line holds ``marker``, other than us."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            zombie = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker in cmd and not zombie:
            found.append(int(entry))
    return found


def processes_with_arg(token: str) -> list[int]:
    """Processes (zombies and us included) whose command line holds ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def mapped_files(pid: int) -> str:
    """What a process has mapped (to see whether it loaded torch's libraries)."""
    return Path(f"/proc/{pid}/maps").read_text()
