"""The warden: the first process of every sandboxed stage. Stdlib only; run by path (``python -I``).

It is started by `harness.sandbox` in a new session with an allowlisted environment, and:

1. asks to die with the harness (``PR_SET_PDEATHSIG``) and becomes a *child subreaper*, so every
   orphaned descendant — also one that called ``setsid`` or double-forked — is re-parented to it;
2. unshares the namespaces it is allowed to (user, mount, network, PID), falling back to fewer
   where the OS refuses, and reports what it achieved on its status pipe;
3. in a new mount namespace: the whole tree remounted read-only except the stage's writable
   paths; small private tmpfs on ``/tmp`` and ``/dev/shm``; hidden paths covered by an empty
   read-only tmpfs; the stage's writable and needed paths under a cover bound back into place
   (through descriptors opened before the covers went on);
4. forks the stage process, which (re)mounts ``/proc`` for its PID namespace, sets resource
   limits, drops every capability, sets ``no_new_privs`` and execs the stage;
5. while the stage runs, counts its processes against its process limit (``rlimits["NPROC"]``,
   also where the kernel's ``RLIMIT_NPROC`` does not hold: root, no user namespace) and kills it
   once over (exit status 125);
6. when the stage exits, or on SIGTERM, kills every remaining descendant and exits with the
   stage's status (128 + signal when it was killed).

Why a separate process: a user namespace cannot be created by a process that already has
threads (torch starts them), and the subreaper must outlive the stage to collect its orphans.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_NS_FLAGS = {"user": CLONE_NEWUSER, "mount": CLONE_NEWNS, "net": CLONE_NEWNET, "pid": CLONE_NEWPID}

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
# statvfs f_flag bits that a remount inside a user namespace must keep ("locked" flags).
_ST_TO_MS = ((1, MS_RDONLY), (2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC),
             (1024, MS_NOATIME), (2048, MS_NODIRATIME), (4096, MS_RELATIME))
#: Pseudo file systems left as they are: /dev/null must stay writable, /proc is remounted.
_KEEP_WRITABLE = ("/dev", "/proc", "/sys")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def _enc(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(_enc(source), _enc(target), _enc(fstype), ctypes.c_ulong(flags), _enc(data)),
           f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _unshare(wanted: list[str]) -> list[str]:
    """Unshare as many of the wanted namespaces as the OS allows; return those achieved."""
    attempts = [wanted]
    if "user" in wanted and os.geteuid() == 0:
        # Root where user namespaces are off (some container runtimes): the rest may still work.
        attempts.append([n for n in wanted if n != "user"])
    attempts.append([n for n in wanted if n in ("net",)] + (["user"] if "user" in wanted else []))
    attempts.append([])
    uid, gid = os.getuid(), os.getgid()
    for names in attempts:
        flags = 0
        for name in names:
            flags |= _NS_FLAGS[name]
        if flags == 0:
            return []
        if _libc.unshare(ctypes.c_int(flags)) == 0:
            if "user" in names:
                _write("/proc/self/setgroups", "deny")
                _write("/proc/self/uid_map", f"0 {uid} 1")
                _write("/proc/self/gid_map", f"0 {gid} 1")
            return names
    return []


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            points.append(line.split()[4].encode().decode("unicode_escape"))
    return sorted(set(points), key=len)


def _prepare_mounts(cfg: dict[str, Any]) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path in cfg.get("writable_paths", []):
        _mount(path, path, None, MS_BIND | MS_REC)
    # Every mount read-only, except pseudo file systems and the stage's writable paths.
    writable = set(cfg.get("writable_paths", []))
    for point in _mount_points():
        if point in writable or any(point == k or point.startswith(k + "/") for k in _KEEP_WRITABLE):
            continue
        try:
            st = os.statvfs(point)
        except OSError:
            continue
        keep = 0
        for st_bit, ms_bit in _ST_TO_MS:
            if st.f_flag & st_bit:
                keep |= ms_bit
        with contextlib.suppress(OSError):  # e.g. a mount we cannot see into; the rest still holds
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
    # Paths that stay visible through a cover below, opened now: writable ones through their
    # writable bind mount, the others read-only.
    exposed = _open_exposed([*cfg.get("writable_paths", []), *cfg.get("needed_paths", [])])
    # Covers, outermost first: private scratch space on /tmp and /dev/shm (nothing left there
    # reaches the next stage; a needed path under /tmp, e.g. a test cache, is bound back in),
    # then the hidden paths (other attempts' run directories, /run's sockets, service data),
    # each an empty read-only file system with the exposed paths inside it bound back.
    covers = [(path, True) for path in _SCRATCH] + [(os.path.realpath(h), False) for h in cfg.get("hidden_paths", [])]
    for cover, scratch in sorted(covers, key=lambda c: len(c[0])):
        if not os.path.isdir(cover) or os.path.realpath(cover) in exposed:
            continue
        size = _SCRATCH_SIZE if scratch else "4k"
        _mount("tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={'1777' if scratch else '0755'}")
        for path in sorted(exposed, key=len):
            if path.startswith(cover + "/"):
                _bind_back(path, exposed[path])
        if not scratch:
            _mount(None, cover, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for fd, _ in exposed.values():
        os.close(fd)


#: Private, small scratch file systems (tmpfs is memory: a candidate must not fill the host's).
_SCRATCH = ("/tmp", "/dev/shm")
_SCRATCH_SIZE = "256m"
O_PATH = getattr(os, "O_PATH", 0o10000000)


def _open_exposed(paths: list[str]) -> dict[str, tuple[int, bool]]:
    """``realpath -> (O_PATH fd, is_dir)`` for every existing path, opened before any cover."""
    opened: dict[str, tuple[int, bool]] = {}
    for raw in paths:
        path = os.path.realpath(raw)
        if path in opened or not os.path.exists(path):
            continue
        opened[path] = (os.open(path, O_PATH | os.O_CLOEXEC), os.path.isdir(path))
    return opened


def _bind_back(path: str, entry: tuple[int, bool]) -> None:
    """Bind ``path`` (opened before it was covered) back into place, with its mount flags."""
    fd, is_dir = entry
    if not os.path.exists(path):
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        if is_dir:
            os.mkdir(path)
        else:
            with open(path, "w"):
                pass
    _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_privileges() -> None:
    for cap in range(64):
        failed = _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0
        if failed and ctypes.get_errno() == 22:  # EINVAL: past the last capability
            break
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _libc.capset(ctypes.byref(header), data)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _set_rlimits(limits: dict[str, int], *, own_user_namespace: bool) -> None:
    import resource

    for name, value in limits.items():
        if name == "NPROC" and not own_user_namespace:
            # Counted per user across the host outside a user namespace of our own: a limit meant
            # for the stage would count every process of the service's user. The warden's count
            # (`_watch`) holds the line there.
            continue
        res = getattr(resource, f"RLIMIT_{name}")
        _, hard = resource.getrlimit(res)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(res, (value, value))


#: The host's /proc, opened before the stage mounts its own over it (in a PID namespace, /proc
#: then lists the stage's namespace, where this process and its pids do not appear).
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


#: How often the warden counts a stage's processes against its process limit.
_WATCH_S = 0.25
#: Exit status when the stage outnumbered its process limit (`harness.sandbox.ExitCode`).
_PROCESS_LIMIT_EXIT = 125


def _watch(stage: int, process_limit: int | None) -> int:
    """Reap until the stage exits; its exit status (128 + signal when killed). With a process
    limit, the stage's tree is counted every `_WATCH_S` and killed once it holds more."""
    while True:
        while True:
            try:
                done, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 1
            if done == 0:
                break
            if done == stage:
                code = os.waitstatus_to_exitcode(status)
                return 128 - code if code < 0 else code
        if process_limit and len(_descendants()) > process_limit:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stage, signal.SIGKILL)  # in a PID namespace the kernel ends the rest with it
            return _PROCESS_LIMIT_EXIT
        signal.sigtimedwait([signal.SIGCHLD], _WATCH_S if process_limit else 3600)


def run_warden() -> int:
    global _PROC_FD
    _PROC_FD = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    cfg = json.loads(sys.argv[1])
    parent = os.getppid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the harness died before the line above
        return 1
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    status_fd = cfg["status_fd"]

    # Before the fork: a stage ended right after it started (a prestarted one the referee no
    # longer needs) must still take its child with it, killed and reaped, before we exit.
    def on_term(signum: int, frame: object) -> None:
        _kill_descendants()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    achieved: list[str] = []
    notes: list[str] = []
    if cfg.get("namespaces"):
        achieved = _unshare(list(cfg["namespaces"]))
        if "mount" in achieved:
            try:
                _prepare_mounts(cfg)
            except OSError as exc:
                notes.append(f"mounts: {exc}")

    read_fd, write_fd = os.pipe()  # closes in the stage at exec: tells us exec happened
    os.set_inheritable(write_fd, False)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # `_watch` waits for it
    pid = os.fork()
    if pid == 0:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
            os.close(read_fd)
            if "pid" in achieved and "mount" in achieved:
                _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            _set_rlimits(cfg.get("rlimits", {}), own_user_namespace="user" in achieved)
            _drop_privileges()
            os.chdir(cfg["cwd"])
            os.close(status_fd)
            os.execv(cfg["argv"][0], cfg["argv"])
        except BaseException as exc:  # noqa: BLE001 - report any failure to exec, then die
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
    sys.exit(run_warden())
