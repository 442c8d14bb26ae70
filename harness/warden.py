"""The warden: the first process of every sandbox. Stdlib only; run by path (``python -I``), or
imported by the fork server (`harness.sandboxed.forkserver`), whose forked child runs `run_warden`.

It is started by `harness.sandbox` in a new session with an allowlisted environment, and:

1. asks to die with the harness (``PR_SET_PDEATHSIG``) and becomes a *child subreaper*, so every
   orphaned descendant — also one that called ``setsid`` or double-forked — is re-parented to it;
2. unshares the namespaces it is allowed to (user, mount, network, PID), falling back to fewer
   where the OS refuses, and reports what it achieved on its status pipe;
3. in a new mount namespace: the whole tree remounted read-only except the sandbox's writable
   paths; small private tmpfs on ``/tmp`` and ``/dev/shm``; hidden paths covered by an empty
   read-only tmpfs; the sandbox's writable and needed paths under a cover bound back into place
   (through descriptors opened before the covers went on) — steps 2 and 3 are
   `harness.namespaces`, the one module it imports besides the standard library;
4. forks the sandbox's own process, which (re)mounts ``/proc`` for its PID namespace, sets resource
   limits, drops every capability, sets ``no_new_privs`` and execs the role (forked from a fork
   server: serves it in place, the interpreter and torch already loaded);
5. while that process runs, counts its processes against its process limit (``rlimits["NPROC"]``,
   also where the kernel's ``RLIMIT_NPROC`` does not hold: root, no user namespace) and kills it
   once over (exit status 125);
6. when it exits, or on SIGTERM, kills every remaining descendant and exits with the
   process's status (128 + signal when it was killed).

Why a separate process: a user namespace cannot be created by a process that already has
threads (torch starts them), and the subreaper must outlive the sandbox's process to collect its orphans.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING or __package__:  # imported (`harness.sandboxed.forkserver`)
    from harness.namespaces import MS_NODEV, MS_NOEXEC, MS_NOSUID, check, libc, mount, prepare_mounts, unshare
else:  # run by path in isolated mode: the module beside it is found after the standard library
    sys.path.append(os.path.dirname(os.path.realpath(__file__)))
    from namespaces import MS_NODEV, MS_NOEXEC, MS_NOSUID, check, libc, mount, prepare_mounts, unshare

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

def prctl(option: int, arg: int = 0) -> None:
    check(libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_privileges() -> None:
    for cap in range(64):
        failed = libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0
        if failed and ctypes.get_errno() == 22:  # EINVAL: past the last capability
            break
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    libc.capset(ctypes.byref(header), data)
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def _set_rlimits(limits: dict[str, int], *, own_user_namespace: bool) -> None:
    import resource

    for name, value in limits.items():
        if name == "NPROC" and not own_user_namespace:
            # Counted per user across the host outside a user namespace of our own: a limit meant
            # for the sandbox would count every process of the service's user. The warden's count
            # (`_watch`) holds the line there.
            continue
        res = getattr(resource, f"RLIMIT_{name}")
        _, hard = resource.getrlimit(res)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(res, (value, value))


#: The host's /proc, opened before the sandbox's process mounts its own over it (in a PID namespace, /proc
#: then lists the sandbox's namespace, where this process and its pids do not appear).
_PROC_FD: int | None = None


def _read_stat(entry: str) -> str:
    if _PROC_FD is None:
        with open(f"/proc/{entry}/stat") as fh:
            return fh.read()
    fd = os.open(f"{entry}/stat", os.O_RDONLY, dir_fd=_PROC_FD)
    try:
        return os.read(fd, 4096).decode(errors="replace")
    finally:
        os.close(fd)


def _descendants() -> set[int]:
    """Every descendant of this process, from one pass over /proc (a deep chain costs no more)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir(_PROC_FD if _PROC_FD is not None else "/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = _read_stat(entry)
        except OSError:
            continue
        children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    tree: set[int] = set()
    frontier = [os.getpid()]
    while frontier:
        found = [c for p in frontier for c in children.get(p, ()) if c not in tree]
        tree.update(found)
        frontier = found
    return tree


def _kill_descendants() -> None:
    """SIGKILL every descendant until none is left (orphans keep arriving: we are the subreaper)."""
    for _ in range(200):
        tree = _descendants()
        if not tree:
            return
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _reap(block=False)
        time.sleep(0.01)


def _reap(block: bool) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


#: How often the warden counts a sandbox's processes against its process limit.
_WATCH_S = 0.25
#: Exit status when the sandbox's tree outnumbered its process limit (`harness.sandbox.ExitCode`).
_PROCESS_LIMIT_EXIT = 125


def _watch(child: int, process_limit: int | None) -> int:
    """Reap until the sandbox's process (``child``) exits; its exit status (128 + signal when killed). With a process
    limit, the sandbox's tree is counted every `_WATCH_S` and killed once it holds more."""
    while True:
        while True:
            try:
                done, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 1
            if done == 0:
                break
            if done == child:
                code = os.waitstatus_to_exitcode(status)
                return 128 - code if code < 0 else code
        if process_limit and len(_descendants()) > process_limit:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)  # in a PID namespace the kernel ends the rest with it
            return _PROCESS_LIMIT_EXIT
        signal.sigtimedwait([signal.SIGCHLD], _WATCH_S if process_limit else 3600)


#: A warden's configuration: the JSON `harness.sandbox.SandboxProcess` writes (argv, cwd,
#: namespaces, paths, rlimits, status_fd; a forked one also carries the sandbox's env).
WardenConfig = dict[str, Any]


def _exec_role(cfg: WardenConfig) -> NoReturn:
    os.execv(cfg["argv"][0], cfg["argv"])


def run_warden(cfg: WardenConfig, become_role: Callable[[WardenConfig], NoReturn] = _exec_role) -> int:
    """Confine, start the sandbox's process (``become_role``: exec its argv, or, in a process forked
    from a fork server, run the role in place), watch it, and return its exit status."""
    global _PROC_FD
    _PROC_FD = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the harness died before the line above
        return 1
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    status_fd = cfg["status_fd"]

    # Before the fork: a sandbox ended right after it started (a prestarted one the referee no
    # longer needs) must still take its child with it, killed and reaped, before we exit.
    def on_term(signum: int, frame: object) -> None:
        _kill_descendants()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    achieved: list[str] = []
    notes: list[str] = []
    if cfg.get("namespaces"):
        achieved = unshare(list(cfg["namespaces"]))
        if "mount" in achieved:
            try:
                prepare_mounts(writable_paths=list(cfg.get("writable_paths", [])),
                               needed_paths=list(cfg.get("needed_paths", [])),
                               hidden_paths=list(cfg.get("hidden_paths", [])))
            except OSError as exc:
                notes.append(f"mounts: {exc}")

    read_fd, write_fd = os.pipe()  # closes in the child at exec: tells us exec happened
    os.set_inheritable(write_fd, False)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # `_watch` waits for it
    pid = os.fork()
    if pid == 0:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
            os.close(read_fd)
            if "pid" in achieved and "mount" in achieved:
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            _set_rlimits(cfg.get("rlimits", {}), own_user_namespace="user" in achieved)
            _drop_privileges()
            os.chdir(cfg["cwd"])
            os.close(status_fd)
            if become_role is not _exec_role:
                os.close(write_fd)  # nothing to exec: the role starts now
            become_role(cfg)
        except BaseException as exc:  # noqa: BLE001 - report any failure to exec, then die
            with contextlib.suppress(OSError):  # closed already where the role started in place
                os.write(write_fd, f"{type(exc).__name__}: {exc}".encode()[:2000])
        os._exit(126)
    os.close(write_fd)
    exec_error = b""
    while chunk := os.read(read_fd, 4096):
        exec_error += chunk
    os.close(read_fd)
    with os.fdopen(status_fd, "w") as fh:
        json.dump({"namespaces": achieved, "notes": notes,
                   "exec_error": exec_error.decode(errors="replace")}, fh)

    code = _watch(pid, cfg.get("rlimits", {}).get("NPROC"))
    _kill_descendants()
    return code


if __name__ == "__main__":
    sys.exit(run_warden(json.loads(sys.argv[1])))
