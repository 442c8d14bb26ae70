"""What runs on this machine, read from ``/proc``: sandbox stages, processes by their command
line, what a process mapped (stdlib only)."""

from __future__ import annotations

import os
from pathlib import Path


def stage_processes(root_pid: int | None = None, role: str | None = None) -> list[int]:
    """Live sandbox processes (wardens and roles; only ``role``'s stage when given) descending
    from ``root_pid`` (default: us)."""
    root_pid = root_pid or os.getpid()
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            commands[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace")
        except OSError:
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            commands.pop(int(entry), None)

    def descends(pid: int) -> bool:
        seen = set()
        while pid in parents and pid not in seen:
            if parents[pid] == root_pid:
                return True
            seen.add(pid)
            pid = parents[pid]
        return False

    wanted = (f"harness.roles {role} ",) if role else ("harness.roles", "warden.py")
    return [pid for pid, cmd in commands.items() if any(w in cmd for w in wanted) and descends(pid)]


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
