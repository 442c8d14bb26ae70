"""The referee's side of the trusted reference process: its start, the baselines, the comparer.

`ReferenceClient` starts one reference stage for a Referee (idempotent; restarted after a
failure), times the baselines once and caches them on disk by full provenance (`baseline_key`),
measures the hardened timing loop's own cost (`loop_overhead`) and compares a candidate's outputs
there (`compare`), where the candidate cannot reach the expected ones. The stage runs the
problem's code: what goes wrong in it is `ReferenceFailed`, whose ``kind`` says whose fault it
is. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from harness.channel import ChannelClosed, ChannelTimeout
from harness.options import HarnessOptions, Target, TimingOptions
from harness.problemstage import compiler_cache_dir, limit_message, problem_stage_spec
from harness.progress import StageName, StageReporter
from harness.protocol import OpFailed, StartFailed, read_reply
from harness.protocol.reference import (
    BaselinesRequest,
    Compared,
    CompareItem,
    CompareReply,
    CompareRequest,
    LoopReply,
    LoopRequest,
    ReferenceInfo,
    ReferenceStart,
)
from harness.provenance import HARNESS_VERSION
from harness.sandbox import StageProcess
from harness.seeds import TrialSpec, derive_seed
from harness.stagepool import CANCELLED_MESSAGE, StagePool, stage_namespaces
from harness.verdict import Baselines, ErrorKind, Timing
from harness.wire import WireError
from problems.spec import Problem

__all__ = ["ReferenceClient", "ReferenceFailed"]

_PROBLEM_FRAME = re.compile(r'File "(problem:[^"]*)", line (\d+)')
#: What a reference stage that answered nonsense did (only the problem's code can make it).
_MALFORMED = "the reference process running the problem's code sent a malformed reply"


class ReferenceFailed(RuntimeError):
    """The trusted reference process could not run the problem: ``kind`` says whose fault it is
    (`ErrorKind.PROBLEM`: the problem's own code raised, hung or hit a limit; `ErrorKind.INFRA`:
    ours, or a cancel)."""

    def __init__(self, message: str, details: str = "", kind: ErrorKind = ErrorKind.INFRA) -> None:
        self.details = details
        self.kind = kind
        super().__init__(message)


def _where(errors: str, what: str) -> str:
    """``what``, with the problem file and line of the traceback's last problem frame and the
    exception's last line: "the problem's code failed to run (problem:x, line 12): ValueError: …"."""
    frames = _PROBLEM_FRAME.findall(errors)
    lines = [line for line in errors.strip().splitlines() if line.strip()]
    place = f" ({frames[-1][0]}, line {frames[-1][1]})" if frames else ""
    return f"{what}{place}: {lines[-1].strip()[:300]}" if lines else what


def _problem_failure(process: StageProcess, what: str, details: str) -> str:
    """``what`` failed in a problem stage; led by the limit it hit, if it hit one."""
    limit = limit_message(process.spec, process.exit_code(1.0), details)
    return f"{limit}: {what}" if limit else what


class ReferenceClient:
    """One Referee's reference stage (see the module's docstring).

    Args:
        problem, target, options: the Referee's.
        trials: the trials planned from the job's secret (their expected outputs are computed there).
        secret: the job's secret: only derived seeds leave this process.
        pool: the Referee's stages (the reference is recorded there for a cancel).
        reporter: a new stage reporter for the Referee's current listener.
    """

    def __init__(self, problem: Problem, target: Target, options: HarnessOptions, *, trials: tuple[TrialSpec, ...],
                 secret: int, pool: StagePool, reporter: Callable[[], StageReporter]) -> None:
        self.problem = problem
        self.target = target
        self.options = options
        self.trials = trials
        self._secret = secret
        self._pool = pool
        self._reporter = reporter
        self._process: StageProcess | None = None
        #: What the started reference knows (None until it started).
        self.info: ReferenceInfo | None = None
        self._baselines: Baselines | None = None

    @property
    def transport(self) -> str:
        """How the candidate's outputs reach the comparer."""
        return self.options.cuda_transport if self.target is Target.CUDA else "file"

    def close(self) -> None:
        if self._process is not None:
            self._process.close()
            self._process = None

    def _fail_closed(self) -> None:
        """After a failure mid-request: the reference closed and the spare stages discarded (a
        problem that failed gets no next attempt)."""
        self._pool.discard_spares()
        self.close()

    def _process_alive(self) -> StageProcess:
        assert self._process is not None, "the reference is not started"
        return self._process

    def start(self) -> ReferenceInfo:
        """Start the reference process (idempotent); its specs, FLOPs and environment.

        Raises:
            ReferenceFailed: ``kind`` `ErrorKind.PROBLEM` when the problem's code raised, did not
                start within ``timeouts.reference_start_s`` or hit a limit (the message names it;
                ``details`` is its traceback trimmed to the problem's lines); `ErrorKind.INFRA`
                when ours failed or the Referee was cancelled.
        """
        if self._pool.cancelled:
            raise ReferenceFailed(CANCELLED_MESSAGE)
        if self._process is not None and self._process.exit_code() is None and self.info is not None:
            return self.info
        self.close()
        self._pool.prestart()  # a job's first attempt finds its stages started too
        workdir = self._pool.new_run_dir("reference")
        caches = compiler_cache_dir(self.options, self.problem.sha256)
        caches.mkdir(parents=True, exist_ok=True)
        # Its own PID namespace on cuda too, unless outputs travel by CUDA IPC (which fails across
        # PID namespaces): everything the problem's code starts dies with the stage.
        namespaces = stage_namespaces(self.target if self.options.cuda_transport == "cuda_ipc" else Target.CPU)
        spec = problem_stage_spec(
            "reference", workdir, self.options, self.target, namespaces=namespaces,
            visible=(self._pool.runs_root,), writable=(caches,),
            extra_env={"TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
                       "TRITON_CACHE_DIR": str(caches / "triton")})
        process = self._pool.started(StageProcess(spec, sandbox=self.options.sandbox))
        request = ReferenceStart(
            problem=self.problem, target=self.target, trials=self.trials,
            init_seed=derive_seed(self._secret, "init"), weights_seed=derive_seed(self._secret, "weights"),
            budget_bytes=self.options.cpu_budget_bytes)
        limit_s = self.options.timeouts.reference_start_s
        try:
            with self._reporter().span(StageName.REFERENCE_START):
                raw = process.request(request, timeout=limit_s)
            reply = ReferenceInfo.from_start_reply(raw)
        except ChannelTimeout:
            log = process.log_tail(self.options.output_limit)
            process.kill()
            raise ReferenceFailed(_problem_failure(
                process, f"the problem's code did not finish starting within its time limit of {limit_s:.0f} s "
                "(module code, get_init_inputs, Model, get_inputs and forward of the trials)", log),
                log, ErrorKind.PROBLEM) from None
        except ChannelClosed as exc:
            log = process.log_tail(self.options.output_limit)
            process.kill()
            if self._pool.cancelled:
                raise ReferenceFailed(CANCELLED_MESSAGE) from None
            report = process.sandbox_report
            if report.exec_error or not report.received:
                raise ReferenceFailed(f"the reference process failed to start: {exc}", log) from None
            raise ReferenceFailed(_problem_failure(
                process, f"the reference process running the problem's code {process.describe_exit()}", log),
                log, ErrorKind.PROBLEM) from None
        except WireError as exc:
            process.kill()
            raise ReferenceFailed(f"{_MALFORMED}: {exc}", "", ErrorKind.PROBLEM) from None
        if isinstance(reply, StartFailed):
            process.kill()
            errors = reply.errors
            raise ReferenceFailed(_problem_failure(process, _where(errors, "the problem's code failed to run"), errors),
                                  errors, ErrorKind.PROBLEM)
        self._process = process
        self.info = reply
        return reply

    # -- the baselines ---------------------------------------------------------------------
    def baseline_key(self) -> str:
        """The baselines cache's key: everything the timings depend on (the reference's environment,
        the problem, the harness, the mode, the timing options, the CPU sizes)."""
        env = self.info.environment.to_dict() if self.info is not None else {}
        material = {
            "problem": self.problem.sha256, "target": self.target.value, "env": env,
            "harness": HARNESS_VERSION, "mode": self.problem.mode.value, "trials": self.options.trials,
            "timing": self.options.timing.to_dict(), "compile_mode": "default",
            "compile_baseline": self.options.compile_baseline,
            "cpu_sizes": self.problem.cpu_sizes if self.target is Target.CPU else {},
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]

    def _baseline_path(self) -> Path:
        return self.options.baselines_dir / f"{self.baseline_key()}.json"

    def baselines(self) -> Baselines:
        """Eager and torch.compile timings of the reference, cached by full provenance (once the
        stages starting up are ready: nothing else may run while they are timed)."""
        if self._baselines is not None:
            return self._baselines
        self.start()
        path = self._baseline_path()
        if self.options.reuse_baselines and path.exists():
            try:
                self._baselines = Baselines.from_dict(json.loads(path.read_text()))
                return self._baselines
            except ValueError:  # a corrupt cache entry (a WireError too) is recomputed
                path.unlink(missing_ok=True)
        reference = self._process_alive()
        self._pool.settle()
        try:
            with self._reporter().span(StageName.BASELINES):
                raw = reference.request(BaselinesRequest(timing=self.options.timing,
                                                         compile_baseline=self.options.compile_baseline),
                                        timeout=self.options.timeouts.baselines_s)
            reply = read_reply(raw, lambda r: Baselines.from_dict(r.data), "the baselines reply")
        except ChannelTimeout:
            log = reference.log_tail(self.options.output_limit)
            self._fail_closed()
            raise ReferenceFailed(_problem_failure(
                reference, "timing the problem's model (the baselines) did not end within its time limit of "
                f"{self.options.timeouts.baselines_s:.0f} s", log), log, ErrorKind.PROBLEM) from None
        except ChannelClosed as exc:
            log = reference.log_tail(self.options.output_limit)
            self._fail_closed()
            if self._pool.cancelled:
                raise ReferenceFailed(CANCELLED_MESSAGE) from None
            raise ReferenceFailed(_problem_failure(
                reference, f"timing the baselines failed: {exc}; the reference process {reference.describe_exit()}",
                log), log, ErrorKind.PROBLEM) from None
        except WireError as exc:
            self._fail_closed()
            raise ReferenceFailed(f"{_MALFORMED}: {exc}", "", ErrorKind.PROBLEM) from None
        if isinstance(reply, OpFailed):
            self._fail_closed()
            raise ReferenceFailed(_problem_failure(
                reference, _where(reply.error, "the problem's code failed while its baselines were timed"),
                reply.error), reply.error, ErrorKind.PROBLEM)
        self._baselines = reply
        eager = reply.eager
        noisy = eager is None or any(w.startswith("noisy") for w in eager.warnings)
        if self.options.reuse_baselines and not noisy:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")  # a noisy baseline is not kept for later jobs
            tmp.write_text(json.dumps(reply.to_dict()))
            tmp.replace(path)
        return reply

    # -- during a candidate's evaluation ------------------------------------------------------
    def loop_overhead(self, timing: TimingOptions, sets: tuple[int, ...]) -> float:
        """Seconds the timing request ``timing`` costs beyond the calls it times: the reference
        process runs the same loop with the reference model; what our clock saw, less the calls
        (its own samples, trusted, and the untimed calls at their median), is the loop's cost."""
        reference = self._process_alive()
        started = time.perf_counter()
        try:
            raw = reference.request(LoopRequest(timing=timing, sets=sets, transport=self.transport),
                                    timeout=self.options.timeouts.timing_s)
        except (ChannelTimeout, ChannelClosed) as exc:
            self._fail_closed()
            raise ReferenceFailed(f"timing the loop's overhead failed: {exc}") from None
        wall_s = time.perf_counter() - started
        try:
            reply = read_reply(raw, LoopReply.read, "the loop reply")
        except WireError as exc:
            raise ReferenceFailed(f"timing the loop's overhead failed: {exc}") from None
        if isinstance(reply, OpFailed):
            raise ReferenceFailed(f"timing the loop's overhead failed: {reply.error}")
        ref: Timing = reply.timing
        untimed = timing.min_warmup_calls + len(sets)
        return max(0.0, wall_s - (sum(ref.samples_ms) + untimed * ref.median_ms) / 1e3)

    def compare(self, items: tuple[CompareItem, ...], directory: Path) -> tuple[Compared, ...]:
        """The comparisons of a candidate's outputs (left in ``directory``) with the reference's."""
        reference = self._process_alive()
        try:
            raw = reference.request(
                CompareRequest(items=items, directory=directory, atol=self.problem.atol, rtol=self.problem.rtol),
                timeout=self.options.timeouts.trial_s * max(1, len(items)))
            reply = read_reply(raw, CompareReply.read, "the comparer's reply")
        except (ChannelTimeout, ChannelClosed) as exc:
            self._fail_closed()
            raise ReferenceFailed(f"the comparer failed: {exc}") from None
        except WireError as exc:
            raise ReferenceFailed(f"the comparer failed: {exc}") from None
        if isinstance(reply, OpFailed):
            raise ReferenceFailed(f"the comparer failed: {reply.error}")
        if len(reply.results) != len(items):
            raise ReferenceFailed(f"the comparer failed: {len(reply.results)} results for {len(items)} outputs")
        return reply.results
