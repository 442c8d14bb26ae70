"""The referee's orchestration: stages in sandboxed processes, a `Verdict` out.

`Referee` holds one trusted reference process for a (problem, target, options) and evaluates
candidates against it, each in a fresh candidate process after a compile stage with no GPU
visible. `evaluate()` is the one-shot form. This module is stdlib only: the process driving
evaluations (a worker, the CLI) never imports torch or initialises CUDA.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import math
import os
import platform
import re
import secrets
import shutil
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.buildcache import build_directory, copy_build, publish_staged
from harness.devices import DeviceSpecs
from harness.hardened import calls_made as _calls_made
from harness.hardened import dictated_calls
from harness.hardened import hardened_bound as _hardened_bound
from harness.hints import static_hints
from harness.integrity import DECISIVE_FLAGS, FLAG_TEXT, PURE_ALLOWED_OPS
from harness.options import Depth, HarnessOptions, Target
from harness.problemstage import compiler_cache_dir, limit_message, memory_rlimits, problem_stage_spec
from harness.progress import StageListener, StageName, StageReporter
from harness.sandbox import (
    ALWAYS_HIDDEN,
    ChannelClosed,
    ChannelTimeout,
    SandboxSpec,
    StageProcess,
    kill_all_stages,
    kill_stages,
    protect_current_process,
    visible_under_run,
)
from harness.seeds import derive_seed, new_secret, plan_trials, secret_identity
from harness.toolchain import cuda_unavailable
from harness.verdict import Baselines, CompileResult, ErrorKind, Stage, Status, Timing, Trial, Verdict
from problems.spec import Policy, Problem, parse_problem

__all__ = ["HARNESS_VERSION", "Referee", "ReferenceFailed", "cancel_all", "evaluate", "warm_headers"]

HARNESS_VERSION = "0.1.0"
#: Namespaces per stage. CPU stages get a PID namespace too; on CUDA the candidate and the
#: reference share one so CUDA IPC stays possible (DESIGN §3: it fails across PID namespaces).
_NAMESPACES = {
    Target.CPU: ("user", "mount", "net", "pid"),
    Target.CUDA: ("user", "mount", "net"),
}
#: Over this, the trusted clock says the candidate's reported samples cannot be right.
_CLOCK_SLACK = 1.02
#: Binding flags whose torch header the trusted warm-up precompiles, per target (a PCH serves only
#: the flags it was built with, normalised: ``""`` and ``-v`` are nothing, each ``-O`` level its own).
#: The first is what the playbook prescribes: a Referee builds it before its first compile if it is
#: missing. All of them are built when a worker starts (`warm_headers`): no flags at all
#: (KernelBench's ``extra_cflags=[""]``, torch's default ``-O0``), ``-O3`` (what models often
#: write), and on CPU ``-O3`` without OpenMP.
_PCH_FLAG_SETS = {
    Target.CUDA: [{"extra_cflags": ["-O1"], "cuda": True}, {"extra_cflags": [], "cuda": True},
                  {"extra_cflags": ["-O3"], "cuda": True}],
    Target.CPU: [{"extra_cflags": ["-O3", "-fopenmp"], "cuda": False}, {"extra_cflags": [], "cuda": False},
                 {"extra_cflags": ["-O3"], "cuda": False}],
}
#: A header's warm-up stage gets this many compile time limits: a PCH build alone took 480 s on a
#: 2-core host under a load of 15 (a minute on the H200 host), and no attempt waits for the extras.
_WARMUP_TIME_FACTOR = 3
#: A candidate's compile may ask the trusted builder for at most this many builds (extensions).
_MAX_DELEGATED_BUILDS = 16
#: A placeholder problem for a Referee that only warms the cache (no reference is ever started).
_WARMUP_PROBLEM = """\
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.zeros(1)]


def get_init_inputs():
    return []
"""
#: Largest file a compile or candidate stage may write (RLIMIT_FSIZE).
_MAX_FILE_BYTES = 4 << 30


def _known_flags(reply: dict[str, Any]) -> list[str]:
    """The integrity flags a stage reported, ignoring anything that is not one."""
    flags = reply.get("flags", [])
    return [f for f in flags if isinstance(f, str) and f in FLAG_TEXT] if isinstance(flags, list) else []


class ReferenceFailed(RuntimeError):
    """The trusted reference process could not run the problem: ``kind`` says whose fault it is
    (`ErrorKind.PROBLEM`: the problem's own code raised, hung or hit a limit; `ErrorKind.INFRA`:
    ours, or a cancel)."""

    def __init__(self, message: str, details: str = "", kind: ErrorKind = ErrorKind.INFRA) -> None:
        self.details = details
        self.kind = kind
        super().__init__(message)


_PROBLEM_FRAME = re.compile(r'File "(problem:[^"]*)", line (\d+)')


def _where(errors: str, what: str) -> str:
    """``what``, with the problem file and line of the traceback's last problem frame and the
    exception's last line: "the problem's code failed to run (problem:x, line 12): ValueError: …"."""
    frames = _PROBLEM_FRAME.findall(errors)
    lines = [line for line in errors.strip().splitlines() if line.strip()]
    place = f" ({frames[-1][0]}, line {frames[-1][1]})" if frames else ""
    return f"{what}{place}: {lines[-1].strip()[:300]}" if lines else what


#: The verdict message of an evaluation cut short by `Referee.cancel`.
CANCELLED_MESSAGE = "cancelled: the job is stopping"


@dataclass(frozen=True)
class _Outcome:
    """What a candidate stage produced before the verdict is assembled."""

    status: Status
    stage: Stage
    message: str = ""
    error_kind: ErrorKind | None = None


@dataclass
class _StartedStage:
    """A compile or candidate stage process with a run directory of its own, possibly started
    before its attempt: it runs no candidate code until a request hands it one."""

    process: StageProcess
    run_dir: Path
    ready: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_ready(self, timeout: float) -> None:
        """Wait for its start-up to end (the role's ``{"ready": true}``, read once); raises
        `ChannelTimeout` or `ChannelClosed` like a request."""
        with self.lock:
            if not self.ready:
                if not self.process.recv(timeout=timeout).get("ready"):
                    raise ChannelClosed("the stage sent something other than its ready message")
                self.ready = True

    def discard(self) -> None:
        self.process.kill()
        shutil.rmtree(self.run_dir, ignore_errors=True)


class Referee:
    """Evaluates candidates for one problem on one target, keeping the reference alive.

    Args:
        problem: the parsed problem.
        target: ``cuda`` or ``cpu``.
        options: the harness options; ``options.secret_seed`` fixes the job's secret.
        on_stage: told when each stage starts and finishes (`harness.progress`); an attribute, so
            whoever built the Referee through a factory can set it afterwards.
    """

    def __init__(self, problem: Problem, target: Target | str, options: HarnessOptions | None = None, *,
                 on_stage: StageListener | None = None) -> None:
        self.problem = problem
        self.on_stage = on_stage
        self.target = Target(target)
        self.options = options or HarnessOptions()
        self._secret = self.options.secret_seed if self.options.secret_seed is not None else new_secret()
        self.trials = plan_trials(
            self._secret, trials=self.options.trials, input_variants=problem.input_variants,
            extra_shapes=problem.trial_shapes(self.target.value),
        )
        self._reference: StageProcess | None = None
        self.reference_info: dict[str, Any] = {}
        self._baselines: Baselines | None = None
        #: Compile results by source hash: the same source again reuses its builds without a stage.
        self._compiled: dict[str, CompileResult] = {}
        self._pch_ready = not self.options.pch
        #: Whether to start a builder ahead for the next attempt: a compile that needed one (and the
        #: first) suggests the next will too; a Referee re-evaluating built sources needs none.
        self._builder_wanted = self.options.trusted_builds
        #: Stages started ahead for the next attempt, by role (`_prestart`).
        self._spares: dict[str, _StartedStage] = {}
        self._spares_lock = threading.Lock()
        #: Every stage process this Referee started (`cancel` kills those still alive).
        self._stages: list[StageProcess] = []
        self._cancelled = threading.Event()
        self._problem_failed = False
        for path in (self.options.builds_dir, self.options.baselines_dir, self.options.runs_dir):
            path.mkdir(parents=True, exist_ok=True)
        #: This Referee's run directories (its reference's and its attempts'): its problem stages
        #: see this one and no other job's.
        self.runs_root = self.options.runs_dir / f"referee-{secrets.token_hex(8)}"
        self.runs_root.mkdir()
        _LIVE_REFEREES.add(self)
        protect_current_process()

    # -- life cycle -----------------------------------------------------------------------
    def close(self) -> None:
        with self._spares_lock:
            spares, self._spares = list(self._spares.values()), {}
        for stage in spares:
            stage.discard()
        if self._reference is not None:
            self._reference.close()
            self._reference = None
        with contextlib.suppress(OSError):  # only if nothing was kept to debug
            self.runs_root.rmdir()

    def __enter__(self) -> Referee:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cancel(self) -> None:
        """Stop for good, from any thread: every stage process of this Referee (reference,
        compile, builder, candidate, prestarted ones) is killed with its process tree, so the
        evaluation in flight returns soon after with an error verdict (``infra``, "cancelled"),
        releasing whatever lock its caller holds; later evaluations return one at once."""
        self._cancelled.set()
        with self._spares_lock:
            stages = list(self._stages)
        kill_stages(stages)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def _started(self, process: StageProcess) -> StageProcess:
        """Record a new stage (for `cancel`); one started as the cancel came is killed at once."""
        with self._spares_lock:
            self._stages = [p for p in self._stages if p.exit_code() is None]
            self._stages.append(process)
        if self._cancelled.is_set():
            process.kill()
        return process

    # -- stages ---------------------------------------------------------------------------
    def _spec(self, role: str, workdir: Path, *, run_dir: Path | None = None,
              visible_builds: tuple[Path, ...] | None = None, **kw: Any) -> SandboxSpec:
        """The sandbox of a stage. ``run_dir`` marks a stage running untrusted code (compile,
        candidate): other attempts' directories hidden, memory and file sizes limited;
        ``visible_builds``: the only build directories it sees (the candidate's own)."""
        rlimits = {"CORE": 0}
        hidden = [*self.options.hidden_paths, *ALWAYS_HIDDEN]
        needed = [self.options.cache_dir, *visible_under_run()]
        if run_dir is not None:
            rlimits.update(self._memory_rlimits(), FSIZE=_MAX_FILE_BYTES)
            hidden.append(self.options.runs_dir)
            needed.append(run_dir)
        if visible_builds is not None:
            hidden.append(self.options.builds_dir)
            needed.extend(visible_builds)
        return SandboxSpec(
            role=role, workdir=workdir, namespaces=_NAMESPACES[self.target],
            needed_paths=tuple(needed), hidden_paths=tuple(hidden), rlimits=rlimits, **kw,
        )

    def _memory_rlimits(self) -> dict[str, int]:
        return memory_rlimits(self.options, self.target)

    def _new_run_dir(self, prefix: str) -> Path:
        path = self.runs_root / f"{prefix}-{secrets.token_hex(8)}"
        path.mkdir(parents=True)
        return path

    def _start_stage(self, role: str) -> _StartedStage:
        """A compile or candidate stage in a fresh run directory. The candidate stage sees no
        build but the copies of its own that `_run_candidate` puts in ``<run_dir>/builds``."""
        run_dir = self._new_run_dir("attempt")
        if role == "compile":
            spec = self._spec("compile", run_dir / "compile", run_dir=run_dir, gpu_visible=False)
        elif role == "builder":
            # Trusted, but it compiles candidates' text: it sees the published headers and objects
            # (read-only) and no other build, so no flag or include can reach a candidate's file.
            shared = tuple(self.options.builds_dir / d for d in ("pch", "objects"))
            for path in shared:
                path.mkdir(parents=True, exist_ok=True)
            spec = self._spec("compile", run_dir / "compile", run_dir=run_dir, gpu_visible=False,
                              visible_builds=shared)
        else:
            builds = run_dir / "builds"
            builds.mkdir()
            spec = self._spec("candidate", run_dir / "run", run_dir=run_dir, visible_builds=(builds,),
                              gpu_visible=self.target is Target.CUDA)
        return _StartedStage(self._started(StageProcess(spec, sandbox=self.options.sandbox)), run_dir)

    def _take_stage(self, role: str) -> _StartedStage:
        """The prestarted stage of this role if it is alive, else a new one."""
        with self._spares_lock:
            spare = self._spares.pop(role, None)
        if spare is not None:
            if spare.process.exit_code() is None:
                return spare
            spare.discard()
        return self._start_stage(role)

    def _prestart(self, *, builder: bool = True) -> None:
        """Start the next attempt's compile and candidate stages now (``options.prestart``), and
        its builder (``builder``) when the last compile needed one.

        A stage's interpreter start and torch import take 3-4 s on the H200 host, and the
        candidate stage's CUDA context and vendor handles more: started ahead, they are paid while
        the agent writes its next candidate instead of inside its attempt. They are trusted until
        a request hands them candidate code, and `_settle` waits for their start-up before
        anything is timed.
        """
        if not self.options.prestart or self._cancelled.is_set():
            return
        for role in ("compile", "candidate", *(("builder",) if builder and self._builder_wanted else ())):
            with self._spares_lock:
                if role in self._spares:
                    continue
            stage = self._start_stage(role)
            with self._spares_lock:
                extra = self._spares.get(role)
                if extra is None:
                    self._spares[role] = stage
            if extra is not None:  # another thread prestarted one meanwhile
                stage.discard()

    def _settle(self, *more: _StartedStage) -> None:
        """Wait until no prestarted stage (nor ``more``) is starting up: their imports must not
        overlap a timing. A stage that fails to start is found out by whoever takes it."""
        with self._spares_lock:
            stages = [*self._spares.values(), *more]
        for stage in stages:
            with contextlib.suppress(ChannelTimeout, ChannelClosed):
                stage.wait_ready(self.options.timeouts.load_s)

    @property
    def prestarted(self) -> dict[str, int]:
        """The stages started ahead for the next attempt: their pids (the wardens'), by role."""
        with self._spares_lock:
            return {role: stage.process.pid for role, stage in self._spares.items()}

    def start_reference(self) -> dict[str, Any]:
        """Start the reference process (idempotent); returns its specs, FLOPs and environment.

        Raises:
            ReferenceFailed: ``kind`` `ErrorKind.PROBLEM` when the problem's code raised, did not
                start within ``timeouts.reference_start_s`` or hit a limit (the message names it;
                ``details`` is its traceback trimmed to the problem's lines); `ErrorKind.INFRA`
                when ours failed or the Referee was cancelled.
        """
        if self._cancelled.is_set():
            raise ReferenceFailed(CANCELLED_MESSAGE)
        if self._reference is not None and self._reference.exit_code() is None:
            return self.reference_info
        if self._reference is not None:
            self._reference.close()
            self._reference = None
        self._prestart()  # a job's first attempt finds its stages started too
        workdir = self._new_run_dir("reference")
        caches = compiler_cache_dir(self.options, self.problem.sha256)
        caches.mkdir(parents=True, exist_ok=True)
        # Its own PID namespace on cuda too, unless outputs travel by CUDA IPC (which fails across
        # PID namespaces): everything the problem's code starts dies with the stage.
        namespaces = _NAMESPACES[self.target] if self.options.cuda_transport == "cuda_ipc" else _NAMESPACES[Target.CPU]
        spec = problem_stage_spec(
            "reference", workdir, self.options, self.target, namespaces=namespaces,
            visible=(self.runs_root,), writable=(caches,),
            extra_env={"TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
                       "TRITON_CACHE_DIR": str(caches / "triton")})
        process = self._started(StageProcess(spec, sandbox=self.options.sandbox))
        request = {
            "problem": self.problem.to_dict(),
            "target": self.target.value,
            "trials": [t.to_dict() for t in self.trials],
            "init_seed": derive_seed(self._secret, "init"),
            "weights_seed": derive_seed(self._secret, "weights"),
            "budget_bytes": self.options.cpu_budget_bytes,
        }
        limit_s = self.options.timeouts.reference_start_s
        try:
            with StageReporter(self.on_stage).span(StageName.REFERENCE_START):
                reply = process.request(request, timeout=limit_s)
        except ChannelTimeout:
            log = process.log_tail(self.options.output_limit)
            process.kill()
            raise ReferenceFailed(self._problem_failure(
                process, f"the problem's code did not finish starting within its time limit of {limit_s:.0f} s "
                "(module code, get_init_inputs, Model, get_inputs and forward of the trials)", log),
                log, ErrorKind.PROBLEM) from None
        except ChannelClosed as exc:
            log = process.log_tail(self.options.output_limit)
            process.kill()
            if self._cancelled.is_set():
                raise ReferenceFailed(CANCELLED_MESSAGE) from None
            if process.sandbox_report.get("exec_error") or not process.sandbox_report:
                raise ReferenceFailed(f"the reference process failed to start: {exc}", log) from None
            raise ReferenceFailed(self._problem_failure(
                process, f"the reference process running the problem's code {process.describe_exit()}", log),
                log, ErrorKind.PROBLEM) from None
        if not reply.get("ok"):
            process.kill()
            errors = str(reply.get("errors", ""))
            raise ReferenceFailed(self._problem_failure(process, _where(errors, "the problem's code failed to run"),
                                                        errors), errors, ErrorKind.PROBLEM)
        self._reference = process
        self.reference_info = reply
        return reply

    @staticmethod
    def _problem_failure(process: StageProcess, what: str, details: str) -> str:
        """``what`` failed in a problem stage; led by the limit it hit, if it hit one."""
        limit = limit_message(process.spec, process.exit_code(1.0), details)
        return f"{limit}: {what}" if limit else what

    @property
    def device_specs(self) -> DeviceSpecs:
        """``get_gpu_specs()`` of the agent: the device the reference runs on."""
        return DeviceSpecs.from_dict(self.start_reference()["specs"])

    def _baseline_key(self) -> str:
        env = self.reference_info.get("environment", {})
        material = {
            "problem": self.problem.sha256, "target": self.target.value, "env": env,
            "harness": HARNESS_VERSION, "mode": self.problem.mode.value, "trials": self.options.trials,
            "timing": self.options.to_dict()["timing"], "compile_mode": "default",
            "compile_baseline": self.options.compile_baseline,
            "cpu_sizes": self.problem.cpu_sizes if self.target is Target.CPU else {},
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]

    def baselines(self) -> Baselines:
        """Eager and torch.compile timings of the reference, cached by full provenance."""
        if self._baselines is not None:
            return self._baselines
        self.start_reference()
        path = self.options.baselines_dir / f"{self._baseline_key()}.json"
        if self.options.reuse_baselines and path.exists():
            try:
                self._baselines = Baselines.from_dict(json.loads(path.read_text()))
                return self._baselines
            except (ValueError, KeyError):
                path.unlink(missing_ok=True)  # a corrupt cache entry is recomputed
        assert self._reference is not None
        self._settle()
        try:
            with StageReporter(self.on_stage).span(StageName.BASELINES):
                reply = self._reference.request(
                    {"op": "baselines", "timing": self.options.to_dict()["timing"],
                     "compile_baseline": self.options.compile_baseline},
                    timeout=self.options.timeouts.baselines_s,
                )
        except ChannelTimeout:
            log = self._reference.log_tail(self.options.output_limit)
            reference = self._reference
            self.close()
            raise ReferenceFailed(self._problem_failure(
                reference, "timing the problem's model (the baselines) did not end within its time limit of "
                f"{self.options.timeouts.baselines_s:.0f} s", log), log, ErrorKind.PROBLEM) from None
        except ChannelClosed as exc:
            log = self._reference.log_tail(self.options.output_limit)
            reference = self._reference
            self.close()
            if self._cancelled.is_set():
                raise ReferenceFailed(CANCELLED_MESSAGE) from None
            raise ReferenceFailed(self._problem_failure(
                reference, f"timing the baselines failed: {exc}; the reference process {reference.describe_exit()}",
                log), log, ErrorKind.PROBLEM) from None
        if "error" in reply:
            errors = str(reply["error"])
            reference = self._reference
            self.close()
            raise ReferenceFailed(self._problem_failure(
                reference, _where(errors, "the problem's code failed while its baselines were timed"), errors),
                errors, ErrorKind.PROBLEM)
        self._baselines = Baselines.from_dict(reply)
        eager = self._baselines.eager
        noisy = eager is None or any(w.startswith("noisy") for w in eager.warnings)
        if self.options.reuse_baselines and not noisy:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")  # a noisy baseline is not kept for later jobs
            tmp.write_text(json.dumps(self._baselines.to_dict()))
            tmp.replace(path)
        return self._baselines

    def compile(self, source: str) -> CompileResult:
        """Import the candidate with no GPU visible, building its extensions into the cache.

        The same source seen before by this Referee, its builds still in the cache, needs no stage:
        builds are keyed by content, so importing it again would load exactly those (and no
        ``compile`` stage event is sent).
        """
        digest = hashlib.sha256(source.encode()).hexdigest()
        known = self._compiled.get(digest)
        if known is not None and all(build_directory(self.options.builds_dir, e["name"], e["key"],
                                                     trusted=e.get("via") == "builder").is_dir()
                                     for e in known.extensions):
            return CompileResult(ok=True, seconds=0.0, kernels=known.kernels,
                                 extensions=tuple({**e, "cached": True} for e in known.extensions))
        self._warm_pch()
        with StageReporter(self.on_stage).span(StageName.COMPILE):
            result = self._compile_stage({"pch": "use" if self.options.pch else False,
                                          "delegate": self.options.trusted_builds}, source=source)
        if result.ok:
            self._compiled[digest] = result
        if result.extensions:  # a candidate without an extension says nothing about the next one
            self._builder_wanted = self.options.trusted_builds and any(
                e.get("via") == "builder" and not e.get("cached") for e in result.extensions)
            if not self._builder_wanted:  # an idle builder would only hold memory until then
                with self._spares_lock:
                    idle = self._spares.pop("builder", None)
                if idle is not None:
                    idle.discard()
        return result

    def _warm_pch(self) -> None:
        """Precompile the torch header for the prescribed flags in a stage that runs trusted code only.

        Candidates' compile stages only use published PCHs (their import-time code could plant a
        poisoned one), so this stage is the only one whose PCHs are published. Skipped once the
        PCHs it recorded in ``builds/pch/warm-<target>.json`` are in place.
        """
        if self._pch_ready:
            return
        self._pch_ready = True  # once per Referee, whatever happens: a failure only costs speed
        self.warm_headers(_PCH_FLAG_SETS[self.target][:1])

    def warm_headers(self, flag_sets: list[dict[str, Any]] | None = None) -> bool:
        """Build the precompiled torch headers of ``flag_sets`` (default: every set of the target,
        `_PCH_FLAG_SETS`, the prescribed one first and on its own) in a stage that runs trusted
        code only, unless a marker says they are in place. One warm-up per cache and target at a
        time (a lock): a Referee whose first compile comes while a worker's start-up warm-up builds
        the prescribed header waits for it instead of building the same; once that one is in
        place it no longer waits.

        Returns:
            Whether the headers are in place.
        """
        if not self.options.pch:
            return False
        if flag_sets is None:
            prescribed = self.warm_headers(_PCH_FLAG_SETS[self.target][:1])
            return self._warm(_PCH_FLAG_SETS[self.target][1:], f"warm-{self.target.value}-more.json") and prescribed
        return self._warm(flag_sets, f"warm-{self.target.value}.json")

    def _warm(self, sets: list[dict[str, Any]], marker_name: str) -> bool:
        """`warm_headers` of ``sets``, recorded in ``builds/pch/<marker_name>`` (their keys)."""
        pch_dir = self.options.builds_dir / "pch"
        pch_dir.mkdir(parents=True, exist_ok=True)
        marker = pch_dir / marker_name

        def in_place() -> bool:
            try:
                keys = json.loads(marker.read_text())
                return bool(keys) and all((pch_dir / str(k)).is_dir() for k in keys)
            except (OSError, ValueError, TypeError):
                return False

        if not sets or in_place():
            return True
        with open(pch_dir / f".warm-{self.target.value}.lock", "w") as lock, contextlib.ExitStack() as stages:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if this process dies
            if in_place():
                return True
            stages.enter_context(StageReporter(self.on_stage).span(StageName.HEADER_BUILD))
            # A stage per flag set (each header takes a compile's time limit on a busy host), as
            # many at once as the compile jobs allow two each (g++ on torch's headers: ~2 GB each).
            workers = max(1, min(len(sets), self.options.max_jobs // 2))
            limit = self.options.timeouts.compile_s * _WARMUP_TIME_FACTOR
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(lambda flags: self._compile_stage(
                    {"pch_warmup": [flags], "pch": True}, trusted=True, timeout=limit), sets))
            keys = [e["pch"]["key"] for result in results for e in result.extensions
                    if isinstance(e.get("pch"), dict) and e["pch"].get("key")]
            if not (all(r.ok for r in results) and len(keys) == len(sets)):
                return False
            tmp = marker.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(keys))
            tmp.replace(marker)
            return True

    def _compile_stage(self, request: dict[str, Any], *, source: str | None = None,
                       trusted: bool = False, timeout: float | None = None) -> CompileResult:
        """Run a compile stage: ``source`` is the candidate to import (None: a trusted request).
        Its run directory is removed unless the compile failed (kept to debug). The builds it
        delegates (``{"build": ...}`` messages) are built by a builder stage (`_build_for`)."""
        # The cache is read-only to the stage (its import-time code is the candidate's): missing
        # builds go to a private staging directory and are published once the stage has exited;
        # precompiled headers only from a trusted stage, objects only from a builder.
        stage = self._take_stage("compile")
        staging = stage.run_dir / "compile" / "builds"
        if source is not None:
            (stage.run_dir / "candidate.py").write_text(source)
            request = {**request, "candidate_path": str(stage.run_dir / "candidate.py")}
        started = time.perf_counter()
        timeout = timeout or self.options.timeouts.compile_s
        builder: _StartedStage | None = None
        delegated = 0
        try:
            with stage.process as process:
                try:
                    stage.wait_ready(timeout)
                    process.channel.send(
                        {**request, "builds_dir": str(self.options.builds_dir), "staging_dir": str(staging),
                         "arch_list": self.options.arch_list, "max_jobs": self.options.max_jobs})
                    while True:
                        reply = process.recv(timeout=max(1.0, timeout - (time.perf_counter() - started)))
                        if "build" not in reply or trusted or not request.get("delegate"):
                            break
                        delegated += 1
                        if delegated > _MAX_DELEGATED_BUILDS:
                            answer = {"ok": False, "log": f"more than {_MAX_DELEGATED_BUILDS} extensions"}
                        else:
                            builder = builder or self._take_stage("builder")
                            answer = self._build_for(builder, reply["build"], started + timeout)
                        process.channel.send(answer)
                except ChannelTimeout:
                    return CompileResult(ok=False, seconds=time.perf_counter() - started,
                                         errors=f"compile timed out after {timeout:.0f} s")
                except ChannelClosed:
                    exec_error = process.sandbox_report.get("exec_error", "")
                    return CompileResult(ok=False, seconds=time.perf_counter() - started,
                                         errors=f"the compile process died ({process.describe_exit()}): "
                                         f"{exec_error}\n" + process.log_tail(4000))
        finally:
            if builder is not None:
                builder.discard()
        publish_staged(staging, self.options.builds_dir, pch=trusted)
        errors = reply.get("errors", "")
        if not reply.get("ok") and reply.get("message"):
            errors = f"{reply['message']}\n{errors}".strip()
        if reply.get("ok"):
            shutil.rmtree(stage.run_dir, ignore_errors=True)
        return CompileResult(ok=bool(reply.get("ok")), seconds=float(reply.get("seconds", 0.0)),
                             extensions=tuple(reply.get("extensions", ())),
                             kernels=tuple(reply.get("kernels", ())), errors=errors)

    def _build_for(self, builder: _StartedStage, build: Any, deadline: float) -> dict[str, Any]:
        """Build one extension a candidate's compile stage asked for, in the builder stage (trusted
        code only), and publish it with the objects it kept; the answer goes back to the stage.
        A builder that dies fails that build; one that runs out of the compile's time limit raises
        `ChannelTimeout` (the compile timed out)."""
        if not isinstance(build, dict):
            return {"ok": False, "log": "malformed build request"}
        staging = builder.run_dir / "compile" / "builds"
        try:
            builder.wait_ready(max(1.0, deadline - time.perf_counter()))
            answer = builder.process.request(
                {"op": "build", "builder": True, "request": build, "builds_dir": str(self.options.builds_dir),
                 "staging_dir": str(staging), "arch_list": self.options.arch_list,
                 "max_jobs": self.options.max_jobs, "pch": self.options.pch},
                timeout=max(1.0, deadline - time.perf_counter()))
        except ChannelTimeout:
            builder.process.kill()
            raise  # the compile's time limit: reported as before, "compile timed out"
        except ChannelClosed:
            log = builder.process.log_tail(4000)
            builder.process.kill()
            return {"ok": False, "log": f"the build process died ({builder.process.describe_exit()})\n{log}"}
        publish_staged(staging, self.options.builds_dir, pch=False, objects=True, trusted=True)
        return answer

    def _hardened_timing(self, baselines: Baselines | None) -> dict[str, Any]:
        """The timing request of a hardened re-time: a number of calls the trusted side dictates,
        enough for about ``max_time_s`` of calls as slow as eager (a candidate no faster than eager
        that claims otherwise leaves that much time the reported median cannot explain)."""
        eager_ms = baselines.eager.median_ms if baselines is not None and baselines.eager is not None else 0.0
        return {**self.options.to_dict()["timing"], "fixed_calls": dictated_calls(eager_ms, self.options.timing)}

    def _loop_overhead(self, timing: dict[str, Any], sets: list[int]) -> float:
        """Seconds the timing request of ``timing`` costs beyond the calls it times: the reference
        process runs the same loop with the reference model; what our clock saw, less the calls
        (its own samples, trusted, and the untimed calls at their median), is the loop's cost."""
        assert self._reference is not None
        started = time.perf_counter()
        try:
            reply = self._reference.request(
                {"op": "loop", "timing": timing, "sets": sets,
                 "transport": self.options.cuda_transport if self.target is Target.CUDA else "file"},
                timeout=self.options.timeouts.timing_s)
        except (ChannelTimeout, ChannelClosed) as exc:
            self.close()
            raise ReferenceFailed(f"timing the loop's overhead failed: {exc}") from None
        wall_s = time.perf_counter() - started
        if "error" in reply:
            raise ReferenceFailed(f"timing the loop's overhead failed: {reply['error']}")
        ref = Timing.from_dict(reply["timing"])
        untimed = int(timing["min_warmup_calls"]) + len(sets)
        return max(0.0, wall_s - (sum(ref.samples_ms) + untimed * ref.median_ms) / 1e3)

    def _compare(self, items: list[dict[str, Any]], directory: Path) -> list[dict[str, Any]]:
        assert self._reference is not None
        try:
            reply = self._reference.request(
                {"op": "compare", "items": items, "directory": str(directory),
                 "atol": self.problem.atol, "rtol": self.problem.rtol},
                timeout=self.options.timeouts.trial_s * max(1, len(items)),
            )
        except (ChannelTimeout, ChannelClosed) as exc:
            self.close()
            raise ReferenceFailed(f"the comparer failed: {exc}") from None
        return list(reply["results"])

    # -- the evaluation ------------------------------------------------------------------
    def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
        """Compile, check and time one candidate.

        Args:
            source: the candidate's Python source (defines ``ModelNew``).
            depth: stop after the compile or the correctness stage, time (the default), or profile.

        Returns:
            The `Verdict`; failures of the candidate or of our infrastructure are values in it.
        """
        depth = Depth(depth)
        try:
            # The candidate stage starts up while this compiles (a builder only if one was started
            # for this attempt: starting one now would compete with the attempt's own stages).
            self._prestart(builder=False)
            verdict = self._evaluate(source, depth) if not self._cancelled.is_set() else None
        finally:
            if not self._problem_failed:  # no next attempt after the problem's own code failed
                self._prestart()  # the next attempt's stages, while the agent writes it
        if verdict is None or self._cancelled.is_set():  # whatever the killed stages made of it
            return self._verdict(_Outcome(Status.ERROR, Stage.PROBLEM if verdict is None else verdict.stage,
                                          CANCELLED_MESSAGE, ErrorKind.INFRA), depth=depth)
        return verdict

    def _evaluate(self, source: str, depth: Depth) -> Verdict:
        hints = tuple(static_hints(source, target=self.target.value))
        unavailable = cuda_unavailable() if self.target is Target.CUDA else None
        if unavailable:  # the machine's fault, not the candidate's: said before any compile
            return self._verdict(_Outcome(Status.ERROR, Stage.COMPILE, unavailable, ErrorKind.INFRA),
                                 hints=hints, depth=depth)
        compiled = self.compile(source)
        base: dict[str, Any] = {"compile": compiled, "hints": hints, "depth": depth}
        if not compiled.ok:
            return self._verdict(_Outcome(Status.ERROR, Stage.COMPILE, "compile failed", ErrorKind.CANDIDATE),
                                 **base, log=compiled.errors)
        if depth is Depth.COMPILE:
            return self._verdict(_Outcome(Status.PASS, Stage.COMPILE, "compiled"), **base)
        try:
            self.start_reference()
            baselines = self.baselines() if depth is Depth.BENCHMARK else None
        except ReferenceFailed as exc:
            self._problem_failed = exc.kind is ErrorKind.PROBLEM
            return self._verdict(_Outcome(Status.ERROR, Stage.PROBLEM, str(exc), exc.kind), **base, log=exc.details)
        prepared = self._take_stage("candidate")
        try:
            verdict = self._run_candidate(prepared, source, baselines, base)
        except ReferenceFailed as exc:
            verdict = self._verdict(_Outcome(Status.ERROR, Stage.CORRECTNESS, str(exc), ErrorKind.INFRA),
                                    **base, log=exc.details)
        finally:
            prepared.process.kill()
        if verdict.status is not Status.ERROR:
            shutil.rmtree(prepared.run_dir, ignore_errors=True)  # outputs can be large; keep failures to debug
        return verdict

    def _run_candidate(self, prepared: _StartedStage, source: str, baselines: Baselines | None,
                       base: dict[str, Any]) -> Verdict:
        stages = StageReporter(self.on_stage)
        try:
            return self._run_candidate_stages(prepared, source, baselines, base, stages)
        finally:
            stages.close()

    def _run_candidate_stages(self, prepared: _StartedStage, source: str, baselines: Baselines | None,
                              base: dict[str, Any], stages: StageReporter) -> Verdict:
        run_dir = prepared.run_dir
        workdir = run_dir / "run"
        timeouts = self.options.timeouts
        compiled: CompileResult = base["compile"]
        # The stage sees its own builds only: copies (marker and library) in its run directory.
        builds = run_dir / "builds"
        for e in compiled.extensions:
            name, key = e.get("name"), e.get("key")
            if isinstance(name, str) and isinstance(key, str) and "/" not in name + key and ".." not in name + key:
                # The builder's build for what the builder built: a compile stage's build of the same
                # key (a plant, possibly) never stands in for it.
                copy_build(self.options.builds_dir, name, key, builds, trusted=e.get("via") == "builder")
        (run_dir / "candidate.py").write_text(source)
        sets = [t.index for t in self.trials if t.kind == "random"][: max(1, self.options.timing.input_sets)]
        timing_request = self.options.to_dict()["timing"]
        hardened = self.options.hardened_timing and base["depth"] is Depth.BENCHMARK
        overheads: list[float] = []
        self._settle(prepared)
        if hardened:
            # The loop's overhead, measured before the candidate's code is loaded (a candidate could
            # burn the CPU to inflate it), now and again once its stage is gone.
            timing_request = self._hardened_timing(baselines)
            overheads.append(self._loop_overhead(timing_request, sets))
        with prepared.process as process:
            base = {**base, "baselines": baselines, "sandbox": process.sandbox_report}

            def fail(outcome: _Outcome, **kw: Any) -> Verdict:
                return self._verdict(outcome, **base, log=process.log_tail(self.options.output_limit), **kw)

            def crashed(stage: Stage, exc: Exception, what: str) -> Verdict:
                if isinstance(exc, ChannelTimeout):
                    reason = f"{what} timed out"
                else:
                    reason = f"{what}: the candidate process {process.describe_exit()}"
                process.kill()
                return fail(_Outcome(Status.ERROR, stage, reason, ErrorKind.CANDIDATE))

            stages.enter(StageName.LOAD)
            try:
                prepared.wait_ready(timeouts.load_s)
                reply = process.request({
                    "workdir": str(workdir), "problem": self.problem.to_dict(), "target": self.target.value,
                    "candidate_path": str(run_dir / "candidate.py"), "builds_dir": str(builds),
                    "arch_list": self.options.arch_list, "mode": self.problem.mode.value,
                    "transport": self.options.cuda_transport if self.target is Target.CUDA else "file",
                    "init_seed": derive_seed(self._secret, "init"),
                    "weights_seed": derive_seed(self._secret, "weights"),
                    "trials": [t.to_dict() for t in self.trials],
                }, timeout=timeouts.load_s)
            except (ChannelTimeout, ChannelClosed) as exc:
                return crashed(Stage.LOAD, exc, "loading the candidate")
            if not reply.get("ok"):
                return fail(_Outcome(Status.ERROR, Stage.LOAD, f"{reply.get('message')}:\n{reply.get('errors', '')}",
                                     ErrorKind.CANDIDATE))
            built_extensions = reply.get("extensions", [])

            # Correctness: every trial, compared in the reference process.
            stages.enter(StageName.CORRECTNESS)
            trials: list[Trial] = []
            flags: list[str] = []
            torch_ops: list[str] = []
            pure = self.problem.policy is Policy.PURE
            for trial in self.trials:
                try:
                    out = process.request({"op": "trial", "index": trial.index,
                                           "record_ops": pure and trial.index == 0}, timeout=timeouts.trial_s)
                except (ChannelTimeout, ChannelClosed) as exc:
                    return crashed(Stage.CORRECTNESS, exc, f"trial {trial.index}")
                if "error" in out:
                    message = f"forward raised in trial {trial.index}:\n{out['error']}"
                    return fail(_Outcome(Status.ERROR, Stage.CORRECTNESS, message, ErrorKind.CANDIDATE),
                                trials=tuple(trials))
                flags.extend(f for f in _known_flags(out) if f not in flags)
                if pure and "ops" in out:
                    torch_ops = [op for op in out["ops"] if op not in PURE_ALLOWED_OPS]
                    if torch_ops:
                        flags.append("torch_compute_in_pure_forward")
                (result,) = self._compare([{"index": trial.index, "output": out.get("output")}], workdir)
                trials.append(Trial(seed_index=trial.index, kind=trial.kind, passed=bool(result["passed"]),
                                    max_abs_err=result["max_abs_err"], mean_abs_err=result["mean_abs_err"],
                                    mismatch_frac=float(result["mismatch_frac"]), message=result["message"]))
            base = {**base, "trials": tuple(trials)}
            if not all(t.passed for t in trials):
                failed = [t for t in trials if not t.passed]
                worst = failed[0]
                return fail(_Outcome(Status.FAIL, Stage.CORRECTNESS,
                                     f"{len(failed)} of {len(trials)} trials failed; trial {worst.seed_index} "
                                     f"({worst.kind}): {worst.message}"), flags=tuple(flags))

            # Integrity: the extension must do real work (mixed), TF32 off, inputs untouched.
            if not built_extensions:
                flags.append("no_custom_kernel")
            elif not pure:
                try:
                    out = process.request({"op": "trial", "index": 0, "noop": True}, timeout=timeouts.trial_s)
                except (ChannelTimeout, ChannelClosed) as exc:
                    return crashed(Stage.INTEGRITY, exc, "the no-op substitution trial")
                if "error" not in out:
                    (result,) = self._compare([{"index": 0, "output": out.get("output")}], workdir)
                    if result["passed"]:
                        flags.append("extension_does_no_work")
            decisive = [f for f in flags if f in DECISIVE_FLAGS]
            if decisive:
                detail = f" (torch ops in forward: {', '.join(torch_ops[:10])})" if torch_ops else ""
                return fail(_Outcome(Status.FAIL, Stage.INTEGRITY, "; ".join(FLAG_TEXT[f] for f in decisive) + detail),
                            flags=tuple(flags))

            if base["depth"] is Depth.CORRECTNESS:
                process.close()
                return self._verdict(_Outcome(Status.PASS, Stage.CORRECTNESS, "correct (not timed)"), **base,
                                     flags=tuple(flags))
            stages.enter(StageName.TIMING)  # or the profile
            if base["depth"] is Depth.PROFILE:
                try:
                    profiled = process.request({"op": "profile"}, timeout=timeouts.timing_s)
                except (ChannelTimeout, ChannelClosed) as exc:
                    return crashed(Stage.TIMING, exc, "profiling")
                if "error" in profiled:
                    return fail(_Outcome(Status.ERROR, Stage.TIMING, f"forward raised while profiled:\n"
                                         f"{profiled['error']}", ErrorKind.CANDIDATE), flags=tuple(flags))
                process.close()
                return self._verdict(_Outcome(Status.PASS, Stage.DONE, "correct and profiled"), **base,
                                     flags=tuple(flags), profile=tuple(profiled["kernels"]))

            # Timing: rotating input sets, outputs re-checked, bounded by our own clock. Hardened:
            # a second run (call ids continued: no input repeats) only if the first one looks out
            # of bounds, for an honest run hit by a burst of load on the host; one must fit.
            runs: list[tuple[Timing, float]] = []
            first_call = 0
            for _ in range(2 if hardened else 1):
                started = time.perf_counter()
                try:
                    timed = process.request({"op": "time", "timing": timing_request, "sets": sets,
                                             "first_call": first_call}, timeout=timeouts.timing_s)
                except (ChannelTimeout, ChannelClosed) as exc:
                    return crashed(Stage.TIMING, exc, "timing")
                wall_s = time.perf_counter() - started
                if "error" in timed:
                    return fail(_Outcome(Status.ERROR, Stage.TIMING, f"forward raised while timed:\n{timed['error']}",
                                         ErrorKind.CANDIDATE), flags=tuple(flags))
                try:  # the reply comes from the untrusted process: anything malformed is its fault
                    timing = Timing.from_dict(timed["timing"])
                    kept: list[dict[str, Any]] = [
                        {"index": int(k["index"]), "call": int(k["call"]), "output": dict(k["output"])}
                        for k in timed["kept"]]
                except (KeyError, TypeError, ValueError, AttributeError):
                    return fail(_Outcome(Status.ERROR, Stage.TIMING, "the timing stage sent a malformed reply",
                                         ErrorKind.CANDIDATE), flags=tuple(flags))
                flags.extend(f for f in _known_flags(timed) if f not in flags)
                samples = timing.samples_ms
                if (not samples or not all(math.isfinite(x) and x > 0 for x in samples)
                        or sum(samples) / 1e3 > wall_s * _CLOCK_SLACK):
                    flags.append("clock_disagrees")
                # Every input set re-checked (the calls after the timed ones cover each), no other.
                calls = [k["call"] for k in kept]
                made = _calls_made(timing_request, sets) if hardened else 0
                if ({k["index"] for k in kept} != set(sets) or len(set(calls)) != len(calls)
                        or min(calls) < first_call or (hardened and max(calls) != first_call + made - 1)
                        or not all(r["passed"] for r in self._compare(kept, workdir))):
                    flags.append("timed_output_mismatch")
                runs.append((timing, wall_s))
                first_call += made
                if (any(f in DECISIVE_FLAGS for f in flags) or not hardened
                        or not _hardened_bound(timing, wall_s, overheads[0], timing_request, sets)[0]):
                    break
            process.close()
            detail = ""
            if hardened and not any(f in DECISIVE_FLAGS for f in flags):
                overheads.append(self._loop_overhead(timing_request, sets))
                bounds = [(_hardened_bound(t, w, max(overheads), timing_request, sets), t) for t, w in runs]
                fitting = [(text, t) for (disagrees, text), t in bounds if not disagrees]
                if fitting:
                    detail, timing = fitting[0]
                else:
                    flags.append("clock_disagrees")
                    detail = bounds[-1][0][1]
            decisive = [f for f in flags if f in DECISIVE_FLAGS]
            if decisive:
                return fail(_Outcome(Status.FAIL, Stage.INTEGRITY,
                                     "; ".join(FLAG_TEXT[f] for f in decisive) + detail),
                            flags=tuple(flags), timing=timing if timing.samples_ms else None)

        verdict = self._verdict(_Outcome(Status.PASS, Stage.DONE, "correct and timed" + detail), **base,
                                flags=tuple(flags), timing=timing)
        return self._quarantine(verdict)

    def _quarantine(self, verdict: Verdict) -> Verdict:
        reasons = []
        speedup = verdict.speedup_vs_eager
        if speedup is not None and speedup > self.options.suspicious_speedup:
            reasons.append("speedup_over_limit")
        if verdict.sol_ms and verdict.timing and verdict.timing.median_ms < verdict.sol_ms:
            reasons.append("faster_than_roofline")
        if not reasons:
            return verdict
        text = "; ".join(FLAG_TEXT[r] for r in reasons)
        return verdict.with_changes(status=Status.SUSPICIOUS, flags=(*verdict.flags, *reasons),
                                    message=f"quarantined: {text}; re-time in a fresh process before trusting it")

    def _verdict(self, outcome: _Outcome, *, compile: CompileResult | None = None,
                 trials: tuple[Trial, ...] = (), timing: Timing | None = None, baselines: Baselines | None = None,
                 flags: tuple[str, ...] = (), hints: tuple[str, ...] = (), log: str = "",
                 sandbox: dict[str, Any] | None = None, depth: Depth = Depth.BENCHMARK,
                 profile: tuple[dict[str, Any], ...] = ()) -> Verdict:
        info = self.reference_info
        env = info.get("environment", {})
        provenance = {
            "target": self.target.value,
            "device": env.get("device"),
            "driver": env.get("driver"),
            "torch": env.get("torch"),
            "cuda": env.get("cuda"),
            "cudnn": env.get("cudnn"),
            "python": env.get("python") or platform.python_version(),
            "harness": HARNESS_VERSION,
            "problem_sha256": self.problem.sha256,
            "mode": self.problem.mode.value,
            "policy": self.problem.policy.value,
            "tolerance": {"atol": self.problem.atol, "rtol": self.problem.rtol,
                          "default": "per dtype: fp32 1e-4, fp16/bf16 1e-2"},
            "trials": len(self.trials),
            "seeds": secret_identity(self._secret),
            "compile_mode": "default",
            "timing_mode": "hardened" if self.options.hardened_timing else "adaptive",
            "sandbox": (sandbox or {}).get("namespaces"),
            "transport": self.options.cuda_transport if self.target is Target.CUDA else "file",
            "host": platform.node(),
            "pid": os.getpid(),
        }
        limit = self.options.output_limit
        return Verdict(
            status=outcome.status, stage=outcome.stage, error_kind=outcome.error_kind,
            message=outcome.message, compile=compile, trials=trials, timing=timing, baselines=baselines,
            sol_ms=info.get("sol_ms"), flops=info.get("flops"), min_bytes=info.get("min_bytes"),
            flags=flags, hints=hints, log=log[-limit:] if log else "", provenance=provenance,
            depth=depth.value, profile=profile,
        )


#: Every Referee of this process not yet collected (`cancel_all`).
_LIVE_REFEREES: weakref.WeakSet[Referee] = weakref.WeakSet()


def cancel_all() -> None:
    """Cancel every Referee of this process and kill any other stage it started (admission): a
    worker about to exit (its supervisor died, it was told to stop) leaves no stage behind, and
    the evaluations in flight end as cancelled rather than as the candidates' crashes."""
    for referee in list(_LIVE_REFEREES):
        referee.cancel()
    kill_all_stages()


def evaluate(problem: Problem, candidate_source: str, target: Target | str = Target.CUDA,
             options: HarnessOptions | None = None) -> Verdict:
    """Evaluate one candidate from scratch (a fresh reference process). There is no next attempt,
    so no stage is started ahead (``prestart`` off): nothing to wait for, nothing wasted.

    Args:
        problem: the parsed problem.
        candidate_source: Python source defining ``ModelNew``.
        target: ``cuda`` or ``cpu``.
        options: harness options (defaults: `HarnessOptions()`).

    Returns:
        The `Verdict`.
    """
    with Referee(problem, target, (options or HarnessOptions()).replace(prestart=False)) as referee:
        return referee.evaluate(candidate_source)


def warm_headers(target: Target | str, options: HarnessOptions | None = None, *,
                 prescribed_only: bool = False) -> bool:
    """Precompile the torch headers of every flag set models commonly use for ``target`` (or only
    the playbook's), in a stage that runs trusted code only (a worker calls this at start-up, so no
    attempt pays for them). Returns whether they are in place; a failure only costs compile speed."""
    options = (options or HarnessOptions()).replace(prestart=False)
    problem = parse_problem(_WARMUP_PROBLEM, problem_id="kernelloop/warm-up")
    with Referee(problem, target, options) as referee:
        return referee.warm_headers(_PCH_FLAG_SETS[Target(target)][:1] if prescribed_only else None)
