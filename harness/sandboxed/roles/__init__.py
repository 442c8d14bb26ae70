"""Sandbox entry points, run only inside sandboxed processes (``python -m harness.sandboxed.roles ROLE FD``,
or forked by `harness.sandboxed.forkserver`).

This package is the one place where problem and candidate code is executed.
"""

from __future__ import annotations

import importlib

from harness.channel import Channel

ROLES = {
    "compile": "harness.sandboxed.roles.compile",
    "reference": "harness.sandboxed.roles.reference",
    "candidate": "harness.sandboxed.roles.candidate",
    "admission": "harness.sandboxed.roles.admission",
    "model": "harness.sandboxed.roles.model",
}
#: The roles a fork server may start: those running candidate code (the builder runs as
#: ``compile``). Never the problem's (reference, admission, model): see `harness.sandboxed.forkserver`.
FORKED_ROLES = ("compile", "candidate")


def serve_role(role: str, fd: int) -> int:
    """Serve ``role`` on the channel at descriptor ``fd``; the process's exit status."""
    importlib.import_module(ROLES[role]).serve(Channel.from_fd(fd))
    return 0
