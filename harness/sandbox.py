"""Sandboxes: spawn, talk over a private channel, kill the whole tree.

Every sandbox (compile, reference, candidate, admission) runs as
``warden (subreaper, namespaces) -> python -m harness.sandboxed.roles ROLE`` (or both forked from a
fork server, `harness.forkserver`), started in its own session
(``setsid``) with an allowlisted environment, stdout and stderr captured to a file that is
truncated when read back. Messages (`harness.protocol`) travel over a private socket pair
(`harness.channel`). What a sandbox may use is a `harness.sandboxspec.SandboxSpec`; what the warden
achieved comes back as a `harness.sandboxspec.SandboxReport`. Stdlib only: the
process that drives evaluations (a worker, the CLI) never imports torch for this.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from enum import IntEnum
from pathlib import Path

from harness.channel import Channel, SandboxMessage
from harness.forkserver import ForkedWarden, ForkServer, ForkServerFailed
from harness.protocol import Exit
from harness.sandboxspec import REPO_ROOT, SandboxReport, SandboxSpec
from vocabulary.wire import JsonObject

__all__ = [
    "ALWAYS_HIDDEN",
    "ExitCode",
    "SandboxProcess",
    "host_private_paths",
    "kill_all_sandboxes",
    "kill_sandboxes",
    "paused_tree",
    "protect_current_process",
    "read_tail",
    "visible_under_run",
]

#: Hidden from every sandbox: the host's sockets (PostgreSQL, Redis, MySQL, Docker) live there, and
#: a network namespace does not cut off Unix sockets reachable through the file system.
ALWAYS_HIDDEN = (Path("/run"),)
_WARDEN = Path(__file__).with_name("warden.py")
_TERM_GRACE_S = 3.0
#: Packages of this checkout a sandbox imports; the rest of it (a deployment's configuration, keys,
#: data beside the code) is not bound back when the checkout lies under a hidden path.
_SANDBOX_PACKAGES = ("harness", "problems", "vocabulary")
#: Never hidden as "the service's working directory or home": covering one of these (or an
#: ancestor of one) would take the system away from the sandbox.
_SYSTEM_DIRS = tuple(Path(p) for p in ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/dev",
                                       "/proc", "/sys", "/var", "/tmp", "/run", "/nix", "/snap"))
#: How long `paused_tree` tries to stop a sandbox's whole tree (it forks, or wakes itself).
_PAUSE_S = 2.0
#: Every sandbox this process started and has not killed yet (`kill_all_sandboxes`).
_LIVE: set[SandboxProcess] = set()
_LIVE_LOCK = threading.Lock()


class ExitCode(IntEnum):
    """Exit codes of a sandbox (the warden adds 128 + signal for a killed sandbox)."""

    OK = 0
    #: The sandbox itself failed in a way it reported over the channel.
    REPORTED = 3
    #: The warden killed the sandbox: its processes outnumbered ``rlimits.processes``.
    PROCESS_LIMIT = 125
    #: The warden could not exec the sandbox.
    EXEC_FAILED = 126


def visible_under_run() -> list[Path]:
    """What CUDA may use under the hidden ``/run``: the persistence daemon's socket, if any."""
    return [p for p in (Path("/run/nvidia-persistenced"),) if p.is_dir()]


def protect_current_process() -> None:
    """Make this process non-dumpable: sandboxes (without capabilities) cannot read its
    ``/proc/<pid>/environ`` or memory even when they run under the same uid."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, ctypes.c_ulong(0), 0, 0, 0)


def _interpreter_paths() -> list[Path]:
    """What a sandbox needs to start Python and import the harness and torch (kept visible): the
    interpreter's prefixes, the installed entries of the import path, and this checkout's two
    packages the roles import. Never the service's working directory (``''`` or its path on
    ``sys.path``) nor the checkout as a whole: a key file or a database beside the code stays
    hidden with them (`host_private_paths`)."""
    cwd = os.path.realpath(os.getcwd())
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent}
    paths.update(REPO_ROOT / name for name in _SANDBOX_PACKAGES)
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        if real in (cwd, str(REPO_ROOT)):
            continue
        paths.add(Path(entry))
    return sorted(paths)


def host_private_paths() -> list[Path]:
    """The service's working directory, the home directory and this checkout: hidden from every
    sandbox (a plaintext API key where ``kernelloop up`` was started, a ``.env``, the data directory
    inside one of them, a ``~/.netrc``). Left alone where hiding would cover the system (``/``,
    ``/usr``...); the interpreter, the harness and the sandbox's own paths under them are bound back."""
    found = []
    for raw in (os.getcwd(), os.path.expanduser("~"), str(REPO_ROOT)):
        path = Path(os.path.realpath(raw))
        if path == Path("/") or any(path == d or path in d.parents for d in _SYSTEM_DIRS):
            continue
        if path not in found:
            found.append(path)
    return found


def kill_sandboxes(sandboxes: list[SandboxProcess]) -> None:
    """Kill sandboxes side by side (each may take its SIGTERM grace; a cancel must be quick)."""
    threads = [threading.Thread(target=sandbox.kill, daemon=True) for sandbox in sandboxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def kill_all_sandboxes() -> int:
    """Kill every sandbox this process started and did not kill yet, with their trees (a worker
    orphaned by its supervisor, a cancel): returns how many there were."""
    with _LIVE_LOCK:
        sandboxes = list(_LIVE)
    kill_sandboxes(sandboxes)
    return len(sandboxes)


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command's name (which may hold spaces and parentheses):
    state, parent, ...; empty once the process is gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _state(pid: int) -> str:
    fields = _stat_fields(pid)
    return fields[0] if fields else "X"


def _tree(root: int) -> frozenset[int]:
    """Every descendant of ``root`` (one pass over /proc; the warden adopts orphans, so a sandbox's
    processes stay under it whatever they do)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and len(fields := _stat_fields(int(entry.name))) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree: set[int] = set()
    frontier = [root]
    while frontier:
        frontier = [c for p in frontier for c in children.get(p, ()) if c not in tree]
        tree.update(frontier)
    return frozenset(tree)


@contextlib.contextmanager
def paused_tree(root: int) -> Iterator[bool]:
    """Every descendant of ``root`` stopped (SIGSTOP: none of its threads runs, and it cannot be
    caught), continued after (SIGCONT). Yields whether the whole tree stopped within `_PAUSE_S`
    (a tree that forks or continues itself is signalled again until it settles). Why: threads a
    candidate left spinning while the reference calibrates the loop would load the host that the
    calibration measures, and widen what the candidate's next run is allowed."""
    deadline = time.monotonic() + _PAUSE_S
    stopped = False
    try:
        while not stopped and time.monotonic() < deadline:
            tree = _tree(root)
            for pid in tree:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            # Settled: the same tree, every process in it stopped (or dead) after the signals.
            stopped = all(_state(pid) in "TtZX" for pid in tree) and _tree(root) == tree
            if not stopped:
                time.sleep(0.001)
        yield stopped
    finally:
        for pid in _tree(root):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)


def read_tail(path: Path, limit: int) -> str:
    """The last ``limit`` bytes of a log, marked when cut."""
    try:
        size = path.stat().st_size
    except OSError:
        return ""
    with open(path, "rb") as fh:
        if size > limit:
            fh.seek(size - limit)
        data = fh.read()
    text = data.decode(errors="replace")
    return f"[... {size - limit} bytes cut ...]\n{text}" if size > limit else text


class SandboxProcess:
    """One running sandbox. Use as a context manager: the tree dies on exit."""

    def __init__(self, spec: SandboxSpec, *, sandbox: bool = True, fork_server: ForkServer | None = None) -> None:
        """Start it: exec'd under a new warden, or forked by ``fork_server`` (the same warden's
        code, no interpreter start; a server that fails falls back to the former)."""
        self.spec = spec
        spec.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = spec.workdir / f"{spec.role}.log"
        parent_sock, child_sock = socket.socketpair()
        status_r, status_w = os.pipe()
        warden_cfg: JsonObject = {
            # -P: the sandbox's own directory (where candidate code writes) is never on its sys.path.
            "argv": [sys.executable, "-P", "-m", "harness.sandboxed.roles", spec.role, str(child_sock.fileno())],
            "cwd": str(spec.workdir),
            "namespaces": list(spec.namespaces) if sandbox else [],
            "writable_paths": [str(p) for p in (spec.workdir, *spec.writable_paths)],
            "needed_paths": [str(p) for p in (*spec.needed_paths, *_interpreter_paths())],
            "hidden_paths": [str(p) for p in (*spec.hidden_paths, *host_private_paths())],
            "rlimits": spec.rlimits.to_dict(),
            "status_fd": status_w,
        }
        env = spec.environment(os.environ)
        self._proc: subprocess.Popen[bytes] | ForkedWarden
        with open(self.log_path, "ab") as log:
            forked = None
            if fork_server is not None:
                with contextlib.suppress(ForkServerFailed):
                    forked = fork_server.spawn(spec.role, warden_cfg, env, log=log.fileno(),
                                               channel=child_sock.fileno(), status=status_w)
            self._proc = forked or subprocess.Popen(
                [sys.executable, "-I", "-S", str(_WARDEN), json.dumps(warden_cfg)],
                env=env,
                cwd=spec.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(child_sock.fileno(), status_w),
                start_new_session=True,
            )
        child_sock.close()
        os.close(status_w)
        with _LIVE_LOCK:
            _LIVE.add(self)
        self.started = time.monotonic()
        self.channel = Channel(parent_sock)
        with os.fdopen(status_r) as fh:
            self.sandbox_report = SandboxReport.parse(fh.read())

    # -- messages ------------------------------------------------------------------------
    def request(self, message: SandboxMessage, *, timeout: float) -> JsonObject:
        """Send one message and wait for the reply, for the caller to read with the reply's
        ``from_dict`` (raises ChannelTimeout / ChannelClosed)."""
        self.channel.send(message)
        return self.channel.recv(timeout=timeout)

    def recv(self, *, timeout: float) -> JsonObject:
        return self.channel.recv(timeout=timeout)

    # -- life cycle -----------------------------------------------------------------------
    @property
    def forked(self) -> bool:
        """Whether a fork server started it (`harness.forkserver`) rather than a new interpreter."""
        return isinstance(self._proc, ForkedWarden)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def exit_code(self, wait_s: float = 0.0) -> int | None:
        try:
            return self._proc.wait(timeout=wait_s) if wait_s else self._proc.poll()
        except subprocess.TimeoutExpired:
            return None

    def describe_exit(self, wait_s: float = 2.0) -> str:
        """A human reason for the sandbox's end: its exit code or the signal that killed it."""
        code = self.exit_code(wait_s)
        if code is None:
            return "still running"
        if code == ExitCode.PROCESS_LIMIT:
            limit = self.spec.rlimits.processes
            return f"was killed: more than {limit if limit is not None else '?'} processes (its process limit)"
        if code > 128:
            try:
                name = signal.Signals(code - 128).name
            except ValueError:
                name = f"signal {code - 128}"
            return f"killed by {name}"
        return f"exited with code {code}"

    def log_tail(self, limit: int) -> str:
        return read_tail(self.log_path, limit)

    def paused(self) -> contextlib.AbstractContextManager[bool]:
        """Every process of the sandbox stopped while the trusted side measures the host alone
        (`paused_tree`); the warden runs on."""
        return paused_tree(self._proc.pid)

    def kill(self) -> None:
        """End the sandbox and every descendant (the warden kills what it adopted)."""
        self.channel.close()
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=_TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        # Stragglers that stayed in the sandbox's session but escaped the warden's adoption.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def close(self, *, timeout: float = 5.0) -> None:
        """Ask the sandbox to finish, then make sure its tree is gone."""
        with contextlib.suppress(OSError):
            self.channel.send(Exit())
        self.exit_code(timeout)
        self.kill()

    def __enter__(self) -> SandboxProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

