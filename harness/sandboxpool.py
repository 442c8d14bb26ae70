"""A Referee's sandboxes: their confinement, starting them ahead of time, killing them all.

`SandboxPool` starts the compile, builder and candidate sandboxes of one Referee, each in a fresh run
directory under the Referee's own (``runs_root``), in the sandbox its role gets (`spec`). It keeps
one of each started ahead for the next attempt (`prestart`: an interpreter start and torch import
cost 3-4 s on the H200 host), waits for them to be ready before anything is timed (`settle`), and
records every process it or the reference client started, so `cancel` kills them all at once.
Standard library only.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import threading
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from harness.channel import ChannelClosed, ChannelTimeout
from harness.forkserver import ForkServer
from harness.options import HarnessOptions
from harness.problemsandbox import memory_limits
from harness.protocol import Ready
from harness.sandbox import ALWAYS_HIDDEN, SandboxProcess, kill_sandboxes, visible_under_run
from harness.sandboxspec import ResourceLimits, SandboxSpec
from vocabulary.evaluation import Target

__all__ = ["CANCELLED_MESSAGE", "SandboxPool", "SandboxRole", "StartedSandbox", "sandbox_namespaces"]

#: The verdict message of an evaluation cut short by `SandboxPool.cancel` (`harness.Referee.cancel`).
CANCELLED_MESSAGE = "cancelled: the job is stopping"
#: Namespaces per sandbox. CPU sandboxes get a PID namespace too; on CUDA the candidate and the
#: reference share one so CUDA IPC stays possible (it fails across PID namespaces: docs/architecture.md, "Processes").
_NAMESPACES = {
    Target.CPU: ("user", "mount", "net", "pid"),
    Target.CUDA: ("user", "mount", "net"),
}
#: Largest file a compile or candidate sandbox may write (RLIMIT_FSIZE).
_MAX_FILE_BYTES = 4 << 30


def sandbox_namespaces(target: Target) -> tuple[str, ...]:
    return _NAMESPACES[target]


class SandboxRole(StrEnum):
    """The sandboxes a pool starts (`harness.sandboxed.roles` runs ``builder`` as a ``compile`` sandbox)."""

    COMPILE = "compile"
    BUILDER = "builder"
    CANDIDATE = "candidate"


@dataclass
class StartedSandbox:
    """A compile or candidate sandbox with a run directory of its own, possibly started
    before its attempt: it runs no candidate code until a request hands it one."""

    process: SandboxProcess
    run_dir: Path
    ready: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_ready(self, timeout: float) -> None:
        """Wait for its start-up to end (the role's `Ready`, read once); raises `ChannelTimeout`
        or `ChannelClosed` like a request."""
        with self.lock:
            if not self.ready:
                if not Ready.is_ready(self.process.recv(timeout=timeout)):
                    raise ChannelClosed("the sandbox sent something other than its ready message")
                self.ready = True

    def discard(self) -> None:
        self.process.kill()
        shutil.rmtree(self.run_dir, ignore_errors=True)


class SandboxPool:
    """The sandboxes of one Referee (see the module's docstring).

    Args:
        options: the harness options (sandbox, limits, timeouts, ``prestart``).
        target: ``cuda`` or ``cpu``.
        runs_root: the Referee's run directory; each sandbox gets one of its own inside.
    """

    def __init__(self, options: HarnessOptions, target: Target, runs_root: Path) -> None:
        self.options = options
        self.target = target
        self.runs_root = runs_root
        #: Whether to start a builder ahead for the next attempt: a compile that needed one (and the
        #: first) suggests the next will too; a Referee re-evaluating built sources needs none.
        self.builder_wanted = options.trusted_builds
        #: Sandboxes started ahead for the next attempt, by role (`prestart`).
        self._spares: dict[SandboxRole, StartedSandbox] = {}
        self._lock = threading.Lock()
        #: Every sandbox started for the Referee (`cancel` kills those still alive).
        self._processes: list[SandboxProcess] = []
        self._cancelled = threading.Event()
        #: Forks the compile, builder and candidate sandboxes of a CPU Referee (``options.fork_server``).
        self._fork_server: ForkServer | None = None
        if options.fork_server and target is Target.CPU:
            self._fork_server = ForkServer(SandboxSpec(role="forkserver", workdir=runs_root / "forkserver",
                                                       gpu_visible=False))

    # -- the cancel registry ----------------------------------------------------------------
    def cancel(self) -> None:
        """Kill every sandbox recorded, from any thread; later ones are killed as they start."""
        self._cancelled.set()
        with self._lock:
            sandboxes = list(self._processes)
        kill_sandboxes(sandboxes)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def started(self, process: SandboxProcess) -> SandboxProcess:
        """Record a new sandbox (for `cancel`); one started as the cancel came is killed at once."""
        with self._lock:
            self._processes = [p for p in self._processes if p.exit_code() is None]
            self._processes.append(process)
        if self._cancelled.is_set():
            process.kill()
        return process

    # -- starting sandboxes -----------------------------------------------------------------
    def spec(self, role: str, workdir: Path, *, gpu_visible: bool, run_dir: Path | None = None,
             visible_builds: tuple[Path, ...] | None = None) -> SandboxSpec:
        """The spec of a sandbox. ``run_dir`` marks a sandbox running untrusted code (compile,
        candidate): other attempts' directories hidden, memory and file sizes limited;
        ``visible_builds``: the only build directories it sees (the candidate's own)."""
        rlimits = ResourceLimits(core_bytes=0)
        hidden = [*self.options.hidden_paths, *ALWAYS_HIDDEN]
        needed = [self.options.cache_dir, *visible_under_run()]
        if run_dir is not None:
            rlimits = replace(memory_limits(self.options, self.target), core_bytes=0, file_bytes=_MAX_FILE_BYTES)
            hidden.append(self.options.runs_dir)
            needed.append(run_dir)
        if visible_builds is not None:
            hidden.append(self.options.builds_dir)
            needed.extend(visible_builds)
        return SandboxSpec(role=role, workdir=workdir, namespaces=_NAMESPACES[self.target], gpu_visible=gpu_visible,
                           needed_paths=tuple(needed), hidden_paths=tuple(hidden), rlimits=rlimits)

    def new_run_dir(self, prefix: str) -> Path:
        path = self.runs_root / f"{prefix}-{secrets.token_hex(8)}"
        path.mkdir(parents=True)
        return path

    def start(self, role: SandboxRole) -> StartedSandbox:
        """A compile, builder or candidate sandbox in a fresh run directory. The candidate sandbox sees
        no build but the copies of its own the candidate run puts in ``<run_dir>/builds``."""
        run_dir = self.new_run_dir("attempt")
        if role is SandboxRole.COMPILE:
            spec = self.spec("compile", run_dir / "compile", run_dir=run_dir, gpu_visible=False)
        elif role is SandboxRole.BUILDER:
            # Trusted, but it compiles candidates' text: it sees the published headers and objects
            # (read-only) and no other build, so no flag or include can reach a candidate's file.
            shared = tuple(self.options.builds_dir / d for d in ("pch", "objects"))
            for path in shared:
                path.mkdir(parents=True, exist_ok=True)
            spec = self.spec("compile", run_dir / "compile", run_dir=run_dir, gpu_visible=False,
                             visible_builds=shared)
        else:
            builds = run_dir / "builds"
            builds.mkdir()
            spec = self.spec("candidate", run_dir / "run", run_dir=run_dir, visible_builds=(builds,),
                             gpu_visible=self.target is Target.CUDA)
        process = SandboxProcess(spec, sandbox=self.options.sandbox, fork_server=self._fork_server)
        return StartedSandbox(self.started(process), run_dir)

    def take(self, role: SandboxRole) -> StartedSandbox:
        """The prestarted sandbox of this role if it is alive, else a new one."""
        with self._lock:
            spare = self._spares.pop(role, None)
        if spare is not None:
            if spare.process.exit_code() is None:
                return spare
            spare.discard()
        return self.start(role)

    # -- sandboxes started ahead ------------------------------------------------------------
    def prestart(self, *, builder: bool = True) -> None:
        """Start the next attempt's compile and candidate sandboxes now (``options.prestart``), and
        its builder (``builder``) when the last compile needed one.

        A sandbox's interpreter start and torch import take 3-4 s on the H200 host, and the
        candidate sandbox's CUDA context and vendor handles more: started ahead, they are paid while
        the agent writes its next candidate instead of inside its attempt. They are trusted until
        a request hands them candidate code, and `settle` waits for their start-up before
        anything is timed.
        """
        if not self.options.prestart or self._cancelled.is_set():
            return
        roles = [SandboxRole.COMPILE, SandboxRole.CANDIDATE]
        if builder and self.builder_wanted:
            roles.append(SandboxRole.BUILDER)
        for role in roles:
            with self._lock:
                if role in self._spares:
                    continue
            sandbox = self.start(role)
            with self._lock:
                extra = self._spares.get(role)
                if extra is None:
                    self._spares[role] = sandbox
            if extra is not None:  # another thread prestarted one meanwhile
                sandbox.discard()

    def settle(self, *more: StartedSandbox) -> None:
        """Wait until no prestarted sandbox (nor ``more``) is starting up: their imports must not
        overlap a timing. A sandbox that fails to start is found out by whoever takes it."""
        with self._lock:
            sandboxes = [*self._spares.values(), *more]
        for sandbox in sandboxes:
            with contextlib.suppress(ChannelTimeout, ChannelClosed):
                sandbox.wait_ready(self.options.timeouts.load_s)

    @property
    def prestarted(self) -> dict[str, int]:
        """The sandboxes started ahead for the next attempt: their pids (the wardens'), by role."""
        with self._lock:
            return {role.value: sandbox.process.pid for role, sandbox in self._spares.items()}

    def discard_spare(self, role: SandboxRole) -> None:
        with self._lock:
            idle = self._spares.pop(role, None)
        if idle is not None:
            idle.discard()

    def discard_spares(self) -> None:
        with self._lock:
            spares, self._spares = list(self._spares.values()), {}
        for sandbox in spares:
            sandbox.discard()

    def close(self) -> None:
        """The spares discarded and the fork server stopped (a later `start` starts it again)."""
        self.discard_spares()
        if self._fork_server is not None:
            self._fork_server.close()
