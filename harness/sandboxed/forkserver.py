"""The fork server's side: one process that imported torch once and forks the CPU sandboxes of a
Referee that run candidate code (compile, builder, candidate), so each one starts in milliseconds
instead of an interpreter start and a torch import (1.3-1.6 CPU-seconds on the 2-core host).

Started by `harness.forkserver.ForkServer` as ``python -P -m harness.sandboxed.forkserver FD`` with
an allowlisted environment; it runs only our code and never sees a problem, a candidate, a seed or
an output. Each request on its control socket (``FD``, a ``SOCK_SEQPACKET`` pair) is a warden's
configuration and the environment of the sandbox, with four descriptors: its log, its channel, the
warden's status pipe and an exit pipe. For each it forks a child that becomes the sandbox's warden
exactly as a started one does (`harness.warden.run_warden`: new session, namespaces, mounts,
process limit, rlimits, capabilities dropped) and whose own child, instead of exec'ing an
interpreter, closes every descriptor but its channel and the standard ones, takes the sandbox's
environment and fresh random seeds, and serves its role in place. The warden writes its exit
status to the exit pipe (the driver is not its parent). The server exits when the driver closes the
socket, killing and reaping the wardens still running; if it dies, they die with it
(``PR_SET_PDEATHSIG``).

What a forked sandbox shares with the others of its server, unlike an exec'd one: the address
layout (ASLR) and the stack canary of the server's process. The trusted reference, which runs the
problem's code and compares outputs, is never forked from it (docs/integrity.md, "Fork server").
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import signal
import socket
import struct
import sys
import tempfile
import traceback
from typing import NoReturn

import torch

from harness.sandboxed.roles import FORKED_ROLES, ROLES, serve_role
from harness.warden import PR_SET_DUMPABLE, WardenConfig, prctl, run_warden

#: Largest request (a warden's configuration and an environment).
_REQUEST_BYTES = 1 << 20
#: Descriptors per request: log, channel, status pipe, exit pipe.
_REQUEST_FDS = 4
#: How often the server reaps the wardens that ended while it waited for a request.
_REAP_S = 0.5
_EXIT = struct.Struct("=i")


def _close_all_but(keep: set[int]) -> None:
    """Close every descriptor but ``keep``: the server's control socket, the warden's /proc and
    exit pipe, other sandboxes' descriptors must never reach candidate code."""
    low = 0
    for fd in sorted(keep):
        if fd > low:  # closerange(n, n) would close everything from n on
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _become_role(cfg: WardenConfig) -> NoReturn:
    """The sandbox's process (the warden's child, confined): its role served in place."""
    code = 1
    try:
        role, fd = cfg["argv"][-2], int(cfg["argv"][-1])
        _close_all_but({0, 1, 2, fd})
        os.environ.clear()
        os.environ.update(cfg["env"])
        tempfile.tempdir = None  # TMPDIR is the sandbox's own directory now
        random.seed()
        torch.seed()
        sys.argv = ["-m", role, str(fd)]
        code = serve_role(role, fd)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - printed to the sandbox's log, as an exec'd one would
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    os._exit(code)


def _warden(control: socket.socket, cfg: WardenConfig, fds: list[int]) -> NoReturn:
    """The forked child: the sandbox's warden (its own session, the driver's log as its output)."""
    code = 1
    try:
        control.close()
        log, channel, status, exit_pipe = fds
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        _close_all_but({0, 1, 2, channel, status, exit_pipe})
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        prctl(PR_SET_DUMPABLE, 1)  # as an exec'd sandbox
        cfg = dict(cfg, status_fd=status, argv=[*cfg["argv"][:-1], str(channel)])
        code = run_warden(cfg, _become_role)
        os.write(exit_pipe, _EXIT.pack(code))
    except BaseException:  # noqa: BLE001 - a forked child never returns into the server's loop
        with contextlib.suppress(Exception):
            traceback.print_exc()
    os._exit(code)


def _reap(wardens: set[int]) -> None:
    with contextlib.suppress(ChildProcessError):
        while (pid := os.waitpid(-1, os.WNOHANG)[0]) != 0:
            wardens.discard(pid)


def _end(wardens: set[int]) -> None:
    """Kill every warden still running (its sandbox dies with it) and reap them all, so none is
    left when the driver sees this process exit."""
    for pid in wardens:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    for pid in wardens:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def serve(fd: int) -> int:
    # Never dumpable: a sandbox without namespaces (``sandbox=False``) runs as the same user and
    # could otherwise attach to the server and reach every sandbox forked after it.
    prctl(PR_SET_DUMPABLE, 0)
    for role in FORKED_ROLES:  # their imports too, paid once here
        importlib.import_module(ROLES[role])
    importlib.import_module("torch.utils.cpp_extension")
    control = socket.socket(fileno=fd)
    control.settimeout(_REAP_S)
    wardens: set[int] = set()
    while True:
        _reap(wardens)
        try:
            message, fds, _, _ = socket.recv_fds(control, _REQUEST_BYTES, _REQUEST_FDS)
        except TimeoutError:
            continue
        if not message:  # the driver closed the socket or died
            _end(wardens)
            return 0
        try:
            request = json.loads(message)
            if len(fds) != _REQUEST_FDS or request.get("role") not in FORKED_ROLES:
                raise ValueError(f"a request with {len(fds)} descriptors for role {request.get('role')!r}")
            cfg = dict(request["warden"], env=dict(request["env"]))
            pid = os.fork()
            if pid == 0:
                _warden(control, cfg, fds)
            wardens.add(pid)
            reply: dict[str, int | str] = {"pid": pid}
        except (ValueError, TypeError, KeyError, OSError) as exc:  # a malformed request, a failed fork
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for received in fds:
                os.close(received)
        control.send(json.dumps(reply).encode())


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1])))
