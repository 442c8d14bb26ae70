"""The harness's options: one frozen dataclass, keyword-only, with named defaults.

The harness runs on bare GPU boxes and inside ``kernelloop replay``, so it does not read the
service's settings object; the service builds a `HarnessOptions` from its own settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vocabulary.wire import JsonObject, Reader

__all__ = [
    "DEFAULT_CACHE_DIR",
    "HarnessOptions",
    "Timeouts",
    "TimingOptions",
    "default_cache_dir",
    "default_tolerance",
]


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The one build, baseline and scratch cache of this machine, shared by the service's workers
    and the CLI (``eval``, ``replay``, ``problems check``, ``optimize``): ``$KERNELLOOP_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/kernelloop``, else ``~/.cache/kernelloop``. `config.Settings` resolves
    its ``cache_dir`` through this too."""
    env = os.environ if environ is None else environ
    if env.get("KERNELLOOP_CACHE_DIR"):
        return Path(env["KERNELLOOP_CACHE_DIR"]).expanduser()
    # XDG: a relative value is invalid and ignored.
    xdg = env.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path(env.get("HOME") or os.path.expanduser("~")) / ".cache"
    return base / "kernelloop"


#: `default_cache_dir` as the environment was when the harness was imported.
DEFAULT_CACHE_DIR = default_cache_dir()

#: Per-dtype tolerance (atol = rtol) of the evaluation contract (docs/architecture.md); a problem may override both.
_TOLERANCE_BY_DTYPE = {"float32": 1e-4, "float64": 1e-6, "float16": 1e-2, "bfloat16": 1e-2}


def default_tolerance(dtype_name: str) -> float:
    """atol = rtol for outputs of this dtype (integers and bools compare exactly)."""
    return _TOLERANCE_BY_DTYPE.get(dtype_name.removeprefix("torch."), 0.0)


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """Seconds per stage; the sandbox's whole process tree is killed when one runs out."""

    #: A binding without the precompiled header, or nvcc with torch headers: ~60 s on the H200 host
    #: and ~100 s on 2 cores; the first build of a precompiled header adds about as much.
    compile_s: float = 600.0
    #: Starting the trusted reference process: import torch, build the model, expected outputs.
    reference_start_s: float = 300.0
    #: Baselines: eager and torch.compile timing (the compile itself can take a minute).
    baselines_s: float = 600.0
    #: Candidate start-up: import torch, load the built extension, construct, load weights.
    load_s: float = 120.0
    #: One correctness trial (forward + transfer + comparison).
    trial_s: float = 60.0
    #: The whole timing stage of one candidate.
    timing_s: float = 120.0


@dataclass(frozen=True, kw_only=True)
class TimingOptions:
    """How a callable is timed (the same for candidates and baselines)."""

    warmup_ms: float = 25.0
    min_warmup_calls: int = 3
    #: At least this many timed calls, whatever the noise says after fewer.
    min_repeats: int = 20
    max_repeats: int = 1000
    #: Stop once the standard error of the mean is below this fraction of the mean...
    target_rel_stderr: float = 0.005
    #: ...or once this much time was spent on timed calls.
    max_time_s: float = 2.0
    #: Input sets rotated across timed calls, so caches do not hold one set.
    input_sets: int = 3
    #: Timed calls audited at random (their outputs compared with the reference's), picked after
    #: each call returned: about this many by the ``min_repeats``-th call, then ``audits / i`` for
    #: call i (`harness.meter.drive.audit_chance`); besides one call per input set at the end. A
    #: cheat on half the calls of a run that stops at 20 slips through with odds of 0.75**20.
    audits: int = 10
    #: Flush the L2 before each timed CUDA call (the CPU loop times warm calls: `harness.meter.noise`).
    flush_cache: bool = True

    def to_dict(self) -> JsonObject:
        """Every field (the requests to sandboxes carry it; the baseline cache's key hashes it)."""
        return {
            "warmup_ms": self.warmup_ms, "min_warmup_calls": self.min_warmup_calls,
            "min_repeats": self.min_repeats, "max_repeats": self.max_repeats,
            "target_rel_stderr": self.target_rel_stderr, "max_time_s": self.max_time_s,
            "input_sets": self.input_sets, "audits": self.audits, "flush_cache": self.flush_cache,
        }

    @classmethod
    def from_dict(cls, data: object) -> TimingOptions:
        r = Reader(data, "the timing options")
        return cls(
            warmup_ms=r.number("warmup_ms"), min_warmup_calls=r.integer("min_warmup_calls"),
            min_repeats=r.integer("min_repeats"), max_repeats=r.integer("max_repeats"),
            target_rel_stderr=r.number("target_rel_stderr"), max_time_s=r.number("max_time_s"),
            input_sets=r.integer("input_sets"), audits=r.integer("audits"), flush_cache=r.flag("flush_cache"),
        )


@dataclass(frozen=True, kw_only=True)
class HarnessOptions:
    """Everything an evaluation depends on besides the problem, the candidate and the target.

    Args:
        cache_dir: builds (``builds/``), baselines (``baselines/``) and scratch (``runs/``).
        trials: random-input correctness trials (plus a value-distribution variant and extra shapes).
        secret_seed: the job's secret; weights and inputs derive from it. ``None`` draws one.
        compile_baseline: also time ``torch.compile`` of the reference (slow on CPU the first time).
        suspicious_speedup: a speedup over eager above this is quarantined as ``suspicious``.
        arch_list: CUDA architectures to build for (one arch keeps compiles fast).
        max_jobs: parallel compile jobs for ninja.
        sandbox: isolate children in namespaces where the OS allows (see docs/integrity.md).
        output_limit: bytes of a child's stdout+stderr kept in a verdict's log.
        memory_limit_mb: host memory of each compile and candidate sandbox (``RLIMIT_AS``
            and ``RLIMIT_DATA`` on the cpu target; ``RLIMIT_DATA`` only on cuda, where the
            driver reserves huge address ranges). ``None``: half the host's memory on cpu, no
            limit on cuda (give the GPU worker's container a memory limit; docs/integrity.md).
        cpu_budget_mb: what one trial of a problem may need on the cpu target (inputs, outputs
            and parameters, computed on the meta device before anything is allocated); a larger
            problem is refused with the figure at admission and reference start. ``None``: an
            eighth of the host's memory (the referee holds several input and output sets).
        hidden_paths: directories no sandbox may see (the service's data directory, a SQLite
            database's folder, secrets); ``/run`` and other attempts' run directories are
            always hidden from compile and candidate sandboxes.
        pch: precompile ``<torch/extension.h>`` for the flag set the playbook prescribes (and, at
            a worker's start-up, `harness.warm_headers`, the other common ones), in a sandbox that
            runs no candidate code, and let candidates' C++ bindings use it (roughly halves a cold
            compile); keyed by normalised flags; candidates never publish one (docs/integrity.md).
        trusted_builds: a candidate's ``load_inline`` of plain sources and allowlisted flags is
            built by a separate builder sandbox that runs no candidate code, which reuses the object
            of every translation unit built before with the same text and flags (an attempt that
            changes only its kernels recompiles only ``cuda.cu``) and keeps new ones for later
            builds; anything else builds in the compile sandbox as before (docs/integrity.md).
        prestart: start the next attempt's compile and candidate sandboxes when an attempt
            ends and when the reference starts (or, if none is waiting, as an attempt begins, so
            the candidate sandbox starts up while it compiles), so their interpreter
            start, torch import and CUDA context (4-5 s on the H200 host) are not inside the
            attempt; they run no candidate code before one is handed to them, and nothing is
            timed while one is starting up. The one-shot `harness.evaluate` turns it off.
        fork_server: on the CPU, fork the compile, builder and candidate sandboxes from one
            process per Referee that imported torch once (`harness.forkserver`), confined by the
            same warden, instead of starting an interpreter and importing torch for each (1.3-1.6
            CPU-seconds, two per attempt). The reference and admission sandboxes, which run the
            problem's code, are always started afresh; CUDA sandboxes too.
        process_limit: processes a sandbox running problem code (admission, reference) may hold at
            once; the warden kills it past that ("exceeded its process limit"), and in a user
            namespace of its own the kernel refuses the fork (``RLIMIT_NPROC``, where threads
            count too). ``None``: 16 per core, at least 1024 (``torch.compile``'s worker pool
            and torch's threads fit).
        problem_cpu_s: CPU seconds (all threads) a sandbox running problem code may use
            (``RLIMIT_CPU``); ``None``: every core busy for the sandbox's own time limits.
        rejudge: this evaluation re-judges a kernel already timed (a quarantined one, a job's best,
            a bench entry) in a fresh Referee with fresh secret seeds (`harness.retime`); the
            verdict says so (its message, ``provenance.timing_mode``).
        reuse_baselines: read and write eager and torch.compile timings in ``baselines/`` (keyed
            by full provenance); ``False`` times them afresh for this Referee and keeps nothing
            (a replay re-measures what a job measured).
    """

    cache_dir: Path = field(default_factory=default_cache_dir)
    trials: int = 3
    secret_seed: int | None = None
    compile_baseline: bool = True
    suspicious_speedup: float = 10.0
    arch_list: str = "9.0a"
    max_jobs: int = max(1, min(8, (os.cpu_count() or 2)))
    sandbox: bool = True
    #: How CUDA outputs reach the comparer: "file" (raw bytes and a validated description) or "cuda_ipc" (no
    #: copy through the host; experimental: on the H200 between our sandboxes
    #: cudaIpcOpenMemHandle returned cudaErrorInvalidValue, so it is not the default yet).
    cuda_transport: str = "file"
    output_limit: int = 16 * 1024
    memory_limit_mb: int | None = None
    cpu_budget_mb: int | None = None
    hidden_paths: tuple[Path, ...] = ()
    pch: bool = True
    trusted_builds: bool = True
    prestart: bool = True
    fork_server: bool = True
    rejudge: bool = False
    reuse_baselines: bool = True
    process_limit: int | None = None
    problem_cpu_s: float | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    timing: TimingOptions = field(default_factory=TimingOptions)

    def replace(self, **changes: Any) -> HarnessOptions:
        return replace(self, **changes)

    @property
    def cpu_budget_bytes(self) -> int:
        if self.cpu_budget_mb is not None:
            return self.cpu_budget_mb * 1024 * 1024
        try:
            host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            host = 16 * 1024**3
        return host // 8

    @property
    def builds_dir(self) -> Path:
        return self.cache_dir / "builds"

    @property
    def baselines_dir(self) -> Path:
        return self.cache_dir / "baselines"

    @property
    def runs_dir(self) -> Path:
        return self.cache_dir / "runs"
