"""The confinement of sandboxes that run a problem's code (admission, reference, baselines).

A posted problem is code from outside, as untrusted as a candidate: its sandboxes get a candidate's
confinement minus only what they need. They see no cache (other jobs' runs, builds and baselines
live there), only their own job's run directory and a compiler cache of their own, keyed by the
problem's content (the code that writes it is the code that reads it); the service's working
directory, home and data directory stay hidden (`harness.sandbox.host_private_paths`, the
options' ``hidden_paths``). Memory, CPU time and process count are limited, and a sandbox that
hits a limit fails with an error naming it (`limit_message`). Stdlib only.
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from pathlib import Path

from harness.options import HarnessOptions
from harness.sandbox import ALWAYS_HIDDEN, ExitCode, visible_under_run
from harness.sandboxspec import ResourceLimits, SandboxSpec
from vocabulary.evaluation import Target

__all__ = ["compiler_cache_dir", "compiler_cache_env", "cpu_seconds_limit", "limit_message", "memory_limit_mb",
           "memory_limits", "problem_sandbox_spec", "process_limit"]

#: Substrings of an error that mean "out of memory" (Python, torch's allocator, the C++ runtime).
_MEMORY_ERRORS = ("MemoryError", "Cannot allocate memory", "can't allocate memory", "std::bad_alloc",
                  "out of memory", "ENOMEM")
#: Substrings that mean "no more processes" (fork refused under RLIMIT_NPROC).
_PROCESS_ERRORS = ("Resource temporarily unavailable", "BlockingIOError", "EAGAIN")


def _host_memory_mb() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    except (ValueError, OSError):
        return 8192


def memory_limit_mb(options: HarnessOptions, target: Target) -> int | None:
    """The host memory a sandbox may map: ``options.memory_limit_mb``, else half the host's on
    cpu and none on cuda (the driver reserves huge address ranges; give the container a limit)."""
    if options.memory_limit_mb is not None:
        return int(options.memory_limit_mb)
    return None if target is Target.CUDA else _host_memory_mb() // 2


def memory_limits(options: HarnessOptions, target: Target) -> ResourceLimits:
    """``RLIMIT_AS`` and ``RLIMIT_DATA`` on cpu, ``RLIMIT_DATA`` only on cuda (`memory_limit_mb`)."""
    limit_mb = memory_limit_mb(options, target)
    if limit_mb is None:
        return ResourceLimits()
    limit = limit_mb * 1024 * 1024
    # RLIMIT_AS bounds every mapping (also shared ones, which RLIMIT_DATA does not count) but
    # breaks CUDA, whose driver reserves address ranges far larger than the memory it uses.
    if target is Target.CUDA:
        return ResourceLimits(data_bytes=limit)
    return ResourceLimits(address_space_bytes=limit, data_bytes=limit)


def cpu_seconds_limit(options: HarnessOptions, role: str) -> int:
    """``RLIMIT_CPU`` of a problem sandbox: ``options.problem_cpu_s``, else every core busy for the
    sandbox's own time limits (admission: one start; the reference: its start and the baselines,
    four times over for the comparisons of a long job). CPU time counts every thread."""
    if options.problem_cpu_s is not None:
        return max(1, int(options.problem_cpu_s))
    cores = os.cpu_count() or 1
    timeouts = options.timeouts
    if role == "admission":
        return int(cores * timeouts.reference_start_s) + 1
    return int(4 * cores * (timeouts.reference_start_s + timeouts.baselines_s)) + 1


def process_limit(options: HarnessOptions) -> int:
    """``options.process_limit``, else 16 per core and at least 1024."""
    if options.process_limit is not None:
        return max(1, int(options.process_limit))
    return max(1024, 16 * (os.cpu_count() or 1))


def compiler_cache_dir(options: HarnessOptions, problem_sha256: str) -> Path:
    """The inductor and Triton caches of one problem (its content's hash): ``torch.compile`` of the
    baselines writes there, and no other problem's reference ever loads it."""
    return options.cache_dir / "problem-caches" / problem_sha256[:32]


def compiler_cache_env(caches: Path) -> dict[str, str]:
    """The environment of a sandbox whose ``torch.compile`` uses ``caches`` (`compiler_cache_dir`).

    Inductor's precompiled header for CPU kernels is off: torch keeps it under the temporary
    directory (a sandbox's own, empty at each start) and builds it before it looks a kernel up in
    the cache, so a warm ``torch.compile`` baseline cost ~8 CPU-s more in every new sandbox, and a
    cold one is no faster with it (benchmarks/results/test_suite_dev2core.md)."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"), "TRITON_CACHE_DIR": str(caches / "triton"),
            "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS": "0"}


def problem_sandbox_spec(role: str, workdir: Path, options: HarnessOptions, target: Target, *,
                         namespaces: tuple[str, ...], visible: tuple[Path, ...] = (),
                         writable: tuple[Path, ...] = (), extra_env: dict[str, str] | None = None) -> SandboxSpec:
    """The spec of a sandbox running problem code.

    Args:
        role: ``reference`` or ``admission``.
        workdir: its private working directory (under the cache's ``runs/``).
        visible: what it reads besides (the reference: its own job's run directory, where the
            candidates' outputs arrive); everything else under the cache is hidden.
        writable: what it writes besides ``workdir`` (its compiler cache).
    """
    rlimits = replace(memory_limits(options, target), core_bytes=0, processes=process_limit(options),
                      cpu_s=cpu_seconds_limit(options, role))
    hidden = (*options.hidden_paths, *ALWAYS_HIDDEN, options.cache_dir)
    return SandboxSpec(role=role, workdir=workdir, namespaces=namespaces, gpu_visible=target is Target.CUDA,
                       needed_paths=(*visible, *visible_under_run()), writable_paths=writable,
                       hidden_paths=hidden, rlimits=rlimits, extra_env=extra_env or {})


def limit_message(spec: SandboxSpec, exit_code: int | None, errors: str) -> str | None:
    """The limit a problem sandbox hit, named, if its exit or its error says it hit one."""
    limits = spec.rlimits
    if exit_code == ExitCode.PROCESS_LIMIT:
        return f"the problem's code exceeded its process limit of {limits.processes} processes"
    if exit_code == 128 + signal.SIGXCPU:
        return f"the problem's code exceeded its CPU-time limit of {limits.cpu_s} s"
    memory = limits.memory_bytes
    if "CUDA out of memory" in errors or "cudaErrorMemoryAllocation" in errors:
        return "the problem's code ran out of GPU memory"
    if any(marker in errors for marker in _MEMORY_ERRORS):
        where = f" of {memory / 1024 ** 3:.1f} GB" if memory else ""
        return f"the problem's code exceeded its memory limit{where}"
    if any(marker in errors for marker in _PROCESS_ERRORS) and limits.processes is not None:
        return f"the problem's code exceeded its process limit of {limits.processes} processes"
    return None
