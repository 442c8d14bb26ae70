"""The warden's namespaces and mounts: unsharing what the OS allows, and the sandbox's view of files.

Used by `harness.warden` only, which runs by path in isolated mode (``python -I -S``) and finds
this module beside it; standard library only, like the warden. `unshare` enters as many of the
wanted namespaces (user, mount, network, PID) as the OS allows; `prepare_mounts`, in a new mount
namespace, remounts the tree read-only except the sandbox's writable paths, gives it small private
``/tmp`` and ``/dev/shm``, covers hidden paths with an empty read-only tmpfs and binds the
sandbox's writable and needed paths under a cover back into place (through descriptors opened
before the covers went on).
"""

from __future__ import annotations

import contextlib
import ctypes
import os

__all__ = ["MS_NODEV", "MS_NOEXEC", "MS_NOSUID", "check", "libc", "mount", "prepare_mounts", "unshare"]

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_NS_FLAGS = {"user": CLONE_NEWUSER, "mount": CLONE_NEWNS, "net": CLONE_NEWNET, "pid": CLONE_NEWPID}

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
# statvfs f_flag bits that a remount inside a user namespace must keep ("locked" flags).
_ST_TO_MS = ((1, MS_RDONLY), (2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC),
             (1024, MS_NOATIME), (2048, MS_NODIRATIME), (4096, MS_RELATIME))
#: Pseudo file systems left as they are: /dev/null must stay writable, /proc is remounted.
_KEEP_WRITABLE = ("/dev", "/proc", "/sys")

libc = ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    check(libc.mount(_enc(source), _enc(target), _enc(fstype), ctypes.c_ulong(flags), _enc(data)),
           f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def unshare(wanted: list[str]) -> list[str]:
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
        if libc.unshare(ctypes.c_int(flags)) == 0:
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


def prepare_mounts(*, writable_paths: list[str], needed_paths: list[str], hidden_paths: list[str]) -> None:
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path in writable_paths:
        mount(path, path, None, MS_BIND | MS_REC)
    # Every mount read-only, except pseudo file systems and the sandbox's writable paths.
    writable = set(writable_paths)
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
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
    # Paths that stay visible through a cover below, opened now: writable ones through their
    # writable bind mount, the others read-only.
    exposed = _open_exposed([*writable_paths, *needed_paths])
    # Covers, outermost first: private scratch space on /tmp and /dev/shm (nothing left there
    # reaches the next sandbox; a needed path under /tmp, e.g. a test cache, is bound back in),
    # then the hidden paths (other attempts' run directories, /run's sockets, service data),
    # each an empty read-only file system with the exposed paths inside it bound back.
    covers = [(path, True) for path in _SCRATCH] + [(os.path.realpath(h), False) for h in hidden_paths]
    for cover, scratch in sorted(covers, key=lambda c: len(c[0])):
        if not os.path.isdir(cover) or os.path.realpath(cover) in exposed:
            continue
        size = _SCRATCH_SIZE if scratch else "4k"
        mount("tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={'1777' if scratch else '0755'}")
        for path in sorted(exposed, key=len):
            if path.startswith(cover + "/"):
                _bind_back(path, exposed[path])
        if not scratch:
            mount(None, cover, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
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
    mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
