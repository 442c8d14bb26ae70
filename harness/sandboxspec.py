"""The confinement of one sandbox, as values: what it may see and use, and what it got.

A `SandboxSpec` says what a sandbox may see and use: its role, working directory,
namespaces, the paths it writes, needs or must not see, whether a GPU is visible, its environment
(an allowlisted copy of the harness's, `ENV_ALLOWLIST`) and its `ResourceLimits`. The warden
(`harness.warden`) applies it and reports what it achieved as a `SandboxReport`;
`harness.sandbox.SandboxProcess` starts the sandbox under it. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vocabulary.wire import Reader, WireError

__all__ = ["ENV_ALLOWLIST", "REPO_ROOT", "ResourceLimits", "SandboxReport", "SandboxSpec"]

#: Environment variables a sandbox inherits from the harness; everything else is dropped, so no
#: API key, database or broker URL reaches a problem or a candidate.
ENV_ALLOWLIST = (
    "PATH", "LANG", "LC_ALL", "TZ", "LD_LIBRARY_PATH",
    "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "CC", "CXX", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
    # Thread counts of a CPU worker (a shared host pins them; nothing secret).
    "OMP_NUM_THREADS", "MKL_NUM_THREADS",
)
#: The checkout this harness runs from: a sandbox imports its ``harness`` and ``problems``.
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, kw_only=True)
class ResourceLimits:
    """A sandbox's resource limits (``setrlimit``, soft = hard), None where the sandbox keeps its own.

    ``processes`` is also counted by the warden (it kills the sandbox past it, `ExitCode.PROCESS_LIMIT`),
    which holds where the kernel's per-user ``RLIMIT_NPROC`` does not (root, no user namespace).
    """

    core_bytes: int | None = None
    file_bytes: int | None = None
    #: Every mapping (``RLIMIT_AS``): breaks CUDA, whose driver reserves huge address ranges.
    address_space_bytes: int | None = None
    data_bytes: int | None = None
    processes: int | None = None
    cpu_s: int | None = None

    @property
    def memory_bytes(self) -> int | None:
        """The memory limit a sandbox hits first (address space, else data)."""
        return self.address_space_bytes or self.data_bytes

    def to_dict(self) -> dict[str, int]:
        """By ``RLIMIT_`` name, as the warden sets them."""
        named = {"CORE": self.core_bytes, "FSIZE": self.file_bytes, "AS": self.address_space_bytes,
                 "DATA": self.data_bytes, "NPROC": self.processes, "CPU": self.cpu_s}
        return {name: value for name, value in named.items() if value is not None}


@dataclass(frozen=True, kw_only=True)
class SandboxReport:
    """What the warden achieved for a sandbox, from its status pipe: the namespaces it entered,
    notes on what it could not do, and why the sandbox could not be exec'd (if it could not).
    ``received`` is False when the warden wrote nothing (it died before)."""

    received: bool = False
    namespaces: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()
    exec_error: str = ""

    @classmethod
    def parse(cls, raw: str) -> SandboxReport:
        if not raw:
            return cls()
        try:
            r = Reader(json.loads(raw), "the warden's status")
            return cls(received=True, namespaces=tuple(r.texts("namespaces")) if r.has("namespaces") else None,
                       notes=tuple(r.texts("notes", optional=True)), exec_error=r.text("exec_error", ""))
        except (ValueError, WireError):
            return cls(received=True, notes=(f"unreadable warden status: {raw[:200]!r}",))


@dataclass(frozen=True, kw_only=True)
class SandboxSpec:
    """How one sandbox is isolated.

    Args:
        role: the entry in ``harness.sandboxed.roles`` to run.
        workdir: the sandbox's private, writable working directory (also HOME and TMPDIR).
        namespaces: wanted namespaces ("user", "mount", "net", "pid"); fewer are used where the
            OS refuses (the warden reports which).
        writable_paths: besides ``workdir``, paths the sandbox may write (the build cache for a
            compile); everything else is read-only where a mount namespace is available.
        needed_paths: paths the sandbox reads that must stay visible: bound back, read-only, when
            they lie under a covered path (the private /tmp, a hidden path).
        hidden_paths: directories covered by an empty read-only file system (other attempts' run
            directories, ``/run`` with its sockets, the service's data); writable and needed
            paths inside them stay visible.
        gpu_visible: whether CUDA devices are visible (compiles run without).
        extra_env: variables set for the sandbox on top of the allowlisted ones.
        rlimits: its resource limits.
    """

    role: str
    workdir: Path
    namespaces: tuple[str, ...] = ("user", "mount", "net", "pid")
    writable_paths: tuple[Path, ...] = ()
    needed_paths: tuple[Path, ...] = ()
    hidden_paths: tuple[Path, ...] = ()
    gpu_visible: bool = True
    extra_env: Mapping[str, str] = field(default_factory=dict)
    rlimits: ResourceLimits = field(default_factory=ResourceLimits)

    def environment(self, parent_env: Mapping[str, str]) -> dict[str, str]:
        env = {k: parent_env[k] for k in ENV_ALLOWLIST if k in parent_env}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.setdefault("LANG", "C.UTF-8")
        env.update(
            HOME=str(self.workdir),
            TMPDIR=str(self.workdir),
            PYTHONPATH=str(REPO_ROOT),
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONUNBUFFERED="1",
            PYTHONNOUSERSITE="1",
            # cuBLAS and cuDNN read this when the candidate's process first uses them (the candidate
            # sandbox does so before importing candidate code): TF32 stays off in vendor math whatever
            # the candidate sets, also between our after-call checks or behind a patched check.
            NVIDIA_TF32_OVERRIDE="0",
        )
        if not self.gpu_visible:
            env["CUDA_VISIBLE_DEVICES"] = ""
        env.update(self.extra_env)
        return env
