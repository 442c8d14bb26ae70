"""Dispatch a sandbox to its role; the channel's fd comes from the warden."""

from __future__ import annotations

import importlib
import sys

from harness.channel import Channel

ROLES = {
    "compile": "harness.sandboxed.roles.compile",
    "reference": "harness.sandboxed.roles.reference",
    "candidate": "harness.sandboxed.roles.candidate",
    "admission": "harness.sandboxed.roles.admission",
    "model": "harness.sandboxed.roles.model",
}


def run_role() -> int:
    role, fd = sys.argv[1], int(sys.argv[2])
    if role not in ROLES:
        print(f"unknown role {role!r}", file=sys.stderr)
        return 2
    channel = Channel.from_fd(fd)
    importlib.import_module(ROLES[role]).serve(channel)
    return 0


if __name__ == "__main__":
    sys.exit(run_role())
