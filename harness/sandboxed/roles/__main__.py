"""Dispatch a sandbox to its role; the channel's fd comes from the warden."""

from __future__ import annotations

import sys

from harness.sandboxed.roles import ROLES, serve_role


def run_role() -> int:
    role, fd = sys.argv[1], int(sys.argv[2])
    if role not in ROLES:
        print(f"unknown role {role!r}", file=sys.stderr)
        return 2
    return serve_role(role, fd)


if __name__ == "__main__":
    sys.exit(run_role())
