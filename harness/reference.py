"""The referee's side of the trusted reference process: its start, the baselines, the comparer.

`ReferenceClient` starts one reference sandbox for a Referee (idempotent; restarted after a
failure), times the baselines once in the metered loop, driven from here exactly as a candidate is
(`harness.meter`), and caches them on disk by full provenance (`baseline_key`), measures what the
loop itself costs per call on this host (`calibration`, the trusted clock's reference) and compares
a candidate's outputs there (`compare`), where the candidate cannot reach the expected ones. The sandbox runs the
problem's code: what goes wrong in it is `ReferenceFailed`, whose ``kind`` says whose fault it
is. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harness.baselinerecord import BaselineRecord, measure_consistently
from harness.channel import ChannelClosed, ChannelTimeout
from harness.devicerecord import DeviceRecord, Measurement
from harness.meter.build import install_meter
from harness.meter.clock import Calibration
from harness.meter.drive import CallPlan, MeteredRun, drive
from harness.meter.noise import timing_of
from harness.options import HarnessOptions
from harness.problemsandbox import compiler_cache_dir, compiler_cache_env, limit_message, problem_sandbox_spec
from harness.progress import StageReporter
from harness.protocol import OpFailed, StartFailed, read_reply
from harness.protocol.meter import MeterEnd, Metering
from harness.protocol.reference import (
    Compared,
    CompareItem,
    CompareReply,
    CompareRequest,
    DeviceMeasured,
    MeterRequest,
    ReferenceInfo,
    ReferenceStart,
    Timed,
)
from harness.sandbox import SandboxProcess
from harness.sandboxpool import CANCELLED_MESSAGE, SandboxPool, sandbox_namespaces
from harness.seeds import TrialSpec, derive_seed
from problems.spec import Problem
from vocabulary.evaluation import Target
from vocabulary.provenance import HARNESS_VERSION
from vocabulary.stages import StageName
from vocabulary.timing import Baselines
from vocabulary.verdict import ErrorKind
from vocabulary.wire import WireError

__all__ = ["CALIBRATION_BUDGET_S", "ReferenceClient", "ReferenceFailed"]

#: What the device's measured rates depend on besides the machine (the sandboxes get these as set here).
_DEVICE_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
_PROBLEM_FRAME = re.compile(r'File "(problem:[^"]*)", line (\d+)')
#: A calibration takes about this long (at least `_CALIBRATION_CALLS[0]` calls, at most the other):
#: enough calls that its floor is an undisturbed one on a busy host.
CALIBRATION_BUDGET_S = 0.5
_CALIBRATION_CALLS = (10, 40)
#: What a reference sandbox that answered nonsense did (only the problem's code can make it).
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


def _problem_failure(process: SandboxProcess, what: str, details: str) -> str:
    """``what`` failed in a problem sandbox; led by the limit it hit, if it hit one."""
    limit = limit_message(process.spec, process.exit_code(1.0), details)
    return f"{limit}: {what}" if limit else what


class ReferenceClient:
    """One Referee's reference sandbox (see the module's docstring).

    Args:
        problem, target, options: the Referee's.
        trials: the trials planned from the job's secret (their expected outputs are computed there).
        secret: the job's secret: only derived seeds leave this process.
        pool: the Referee's sandboxes (the reference is recorded there for a cancel).
        reporter: a new stage reporter for the Referee's current listener.
    """

    def __init__(self, problem: Problem, target: Target, options: HarnessOptions, *, trials: tuple[TrialSpec, ...],
                 secret: int, pool: SandboxPool, reporter: Callable[[], StageReporter]) -> None:
        self.problem = problem
        self.target = target
        self.options = options
        self.trials = trials
        self._secret = secret
        self._pool = pool
        self._reporter = reporter
        self._process: SandboxProcess | None = None
        #: What the started reference knows (None until it started).
        self.info: ReferenceInfo | None = None
        #: Whether a time under the roofline (``info.sol_ms``) may quarantine a candidate.
        self.roofline_trusted = True
        self._baselines: Baselines | None = None
        self._calibration: Calibration | None = None
        #: This client's figures in the baselines record: they never confirm each other.
        self._request_id = secrets.token_hex(8)

    @property
    def timing_sets(self) -> tuple[int, ...]:
        """The trials whose inputs a timing run rotates (random ones, ``input_sets`` of them)."""
        sets = tuple(t.index for t in self.trials if t.kind == "random")
        return sets[: max(1, self.options.timing.input_sets)] or (self.trials[0].index,)

    @property
    def transport(self) -> str:
        """How the candidate's outputs reach the comparer."""
        return self.options.cuda_transport if self.target is Target.CUDA else "file"

    def close(self) -> None:
        if self._process is not None:
            self._process.close()
            self._process = None

    def _fail_closed(self) -> None:
        """After a failure mid-request: the reference closed and the spare sandboxes discarded (a
        problem that failed gets no next attempt)."""
        self._pool.discard_spares()
        self.close()

    def _process_alive(self) -> SandboxProcess:
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
        self._pool.prestart()  # a job's first attempt finds its sandboxes started too
        workdir = self._pool.new_run_dir("reference")
        caches = compiler_cache_dir(self.options, self.problem.sha256)
        caches.mkdir(parents=True, exist_ok=True)
        # Its own PID namespace on cuda too, unless outputs travel by CUDA IPC (which fails across
        # PID namespaces): everything the problem's code starts dies with the sandbox.
        namespaces = sandbox_namespaces(self.target if self.options.cuda_transport == "cuda_ipc" else Target.CPU)
        spec = problem_sandbox_spec(
            "reference", workdir, self.options, self.target, namespaces=namespaces,
            visible=(self._pool.runs_root,), writable=(caches,),
            extra_env=compiler_cache_env(caches))
        meter = install_meter(self.options.builds_dir, workdir)
        process = self._pool.started(SandboxProcess(spec, sandbox=self.options.sandbox))
        devices = self._device_record()
        settled = devices.settled()
        request = ReferenceStart(
            problem=self.problem, target=self.target, trials=self.trials,
            init_seed=derive_seed(self._secret, "init"), weights_seed=derive_seed(self._secret, "weights"),
            budget_bytes=self.options.cpu_budget_bytes, meter_path=meter,
            specs=devices.best() if settled else None)
        limit_s = self.options.timeouts.reference_start_s
        try:
            with self._reporter().span(StageName.REFERENCE_START):
                raw = process.request(request, timeout=limit_s)
                if not settled:  # the device, measured before the problem's code was loaded
                    measured = DeviceMeasured.from_dict(raw)
                    devices.add(Measurement(specs=measured.specs, host_loaded=measured.host_loaded))
                    raw = process.recv(timeout=limit_s)
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
        best = devices.best()
        if best is not None:  # the roofline of the machine's best measurement, whatever the sandbox said
            reply = replace(reply, specs=best, sol_ms=best.sol_ms(reply.flops, reply.min_bytes, reply.output_dtype))
        # Other work only lowers a measured rate, so CPU peaks measured only on a loaded host put the
        # roofline above honest times (seen: a 6.8x kernel "faster than the roofline" on a busy
        # 2-core host, 2.5x and 0.4x in the next runs). Shown, but no quarantine on it until this
        # machine was measured unloaded. A GPU's rates do not depend on the host's load.
        self.roofline_trusted = self.target is not Target.CPU or devices.measured_unloaded()
        self._process = process
        self.info = reply
        return reply

    def _device_record(self) -> DeviceRecord:
        """This machine's record of the device (`harness.devicerecord`), for what the sandboxes get."""
        environment = {name: os.environ.get(name, "") for name in _DEVICE_ENVIRONMENT}
        return DeviceRecord(self.options.cache_dir / "devices", self.target.value, environment)

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
            # 2: figures are cached only once confirmed (entries written before may be poisoned).
            "cache": 2,
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]

    def _baseline_path(self) -> Path:
        return self.options.baselines_dir / f"{self.baseline_key()}.json"

    def baselines(self) -> Baselines:
        """Eager and torch.compile timings of the reference, cached by full provenance (once the
        sandboxes starting up are ready: nothing else may run while they are timed).

        A measured figure is recorded for this machine (`harness.baselinerecord`) and cached
        only once it agrees with one an earlier job measured; one that disagrees is re-taken, and
        if no re-take agrees the fastest figure the machine has is used and nothing is cached
        (its notes say so)."""
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
        reuse = self.options.reuse_baselines  # off (a replay): the record is read, nothing is written
        record = BaselineRecord(self.options.baselines_dir, self.baseline_key(), self._request_id)
        chosen, confirmed = measure_consistently(record, self._measure_baselines, keep=reuse)
        if confirmed and reuse:  # another job's figure agrees: kept for later jobs
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(chosen.to_dict()))
            tmp.replace(path)
        self._baselines = chosen
        return chosen

    def _measure_baselines(self) -> Baselines:
        """One measurement of the baselines, in the reference's metered loop."""
        self._pool.settle()
        with self._reporter().span(StageName.BASELINES):
            return self._time_baselines()

    def _time_baselines(self) -> Baselines:
        plan = CallPlan.from_timing(self.options.timing, len(self.timing_sets), audits=False,
                                    seed_forward=self.problem.random)
        # The faster of two runs: interference from other work on the host only ever slows a run
        # down, and an inflated baseline would quarantine honest candidates as "suspicious".
        runs = [self._metered(Timed.EAGER, plan, "timing the problem's model (the baselines)") for _ in range(2)]
        cuda = self.target is Target.CUDA
        eager = min((timing_of([c.sample_ms for c in run.timed], cuda=cuda) for run in runs),
                    key=lambda t: t.median_ms)
        if not self.options.compile_baseline:
            return Baselines(eager=eager, torch_compile=None, notes=("torch.compile baseline switched off",))
        try:
            compiled = self._metered(Timed.COMPILED, plan, "timing the problem's model under torch.compile")
        except ReferenceFailed as exc:
            if exc.kind is not ErrorKind.PROBLEM or self._process is None:
                raise
            return Baselines(eager=eager, torch_compile=None, notes=(f"torch.compile failed: {str(exc)[:300]}",))
        return Baselines(eager=eager, torch_compile=timing_of([c.sample_ms for c in compiled.timed], cuda=cuda))

    def _metered(self, timed: Timed, plan: CallPlan, what: str) -> MeteredRun:
        """One metered run of the reference model (see `harness.meter`), driven from here.

        Raises:
            ReferenceFailed: the problem's code raised, hung or hit a limit (`ErrorKind.PROBLEM`;
                a forward that raised inside the loop leaves the reference alive), or ours failed.
        """
        reference = self._process_alive()
        limit_s = self.options.timeouts.baselines_s
        request = MeterRequest(timed=timed, sets=self.timing_sets, flush=self.options.timing.flush_cache)
        try:
            raw = reference.request(request, timeout=limit_s)
            if not Metering.is_metering(raw):
                failed = read_reply(raw, MeterEnd.read, "the meter reply")
                message = failed.error if isinstance(failed, OpFailed) else "no metered loop"
                self._fail_closed()
                raise ReferenceFailed(_problem_failure(reference, _where(message, f"the problem's code failed before "
                                                                                    f"{what}"), message),
                                      message, ErrorKind.PROBLEM)
            run = drive(reference.channel, plan, timeout_s=limit_s)
            if run.protocol_error is not None or run.message is not None:
                self._fail_closed()
                raise ReferenceFailed(f"{_MALFORMED}: {run.protocol_error or run.message}", "", ErrorKind.PROBLEM)
            end = read_reply(reference.recv(timeout=limit_s), MeterEnd.read, "the meter's end")
        except ChannelTimeout:
            log = reference.log_tail(self.options.output_limit)
            self._fail_closed()
            raise ReferenceFailed(_problem_failure(
                reference, f"{what} did not end within its time limit of {limit_s:.0f} s", log), log,
                ErrorKind.PROBLEM) from None
        except ChannelClosed as exc:
            log = reference.log_tail(self.options.output_limit)
            self._fail_closed()
            if self._pool.cancelled:
                raise ReferenceFailed(CANCELLED_MESSAGE) from None
            raise ReferenceFailed(_problem_failure(
                reference, f"{what} failed: {exc}; the reference process {reference.describe_exit()}", log), log,
                ErrorKind.PROBLEM) from None
        except WireError as exc:
            self._fail_closed()
            raise ReferenceFailed(f"{_MALFORMED}: {exc}", "", ErrorKind.PROBLEM) from None
        run.close()
        if isinstance(end, OpFailed):
            self._fail_closed()
            raise ReferenceFailed(f"{what} failed: {end.error}")
        if run.failure is not None:
            raise ReferenceFailed(_where(run.failure.message, f"the problem's code failed while {what}"),
                                  run.failure.message, ErrorKind.PROBLEM)
        return run

    # -- during a candidate's evaluation ------------------------------------------------------
    def calibration(self, *, again: bool = False) -> Calibration:
        """What the metered loop costs per call around the forward on this host (trusted − sample,
        `harness.meter.clock`), measured with the reference model: once per Referee, and ``again``
        when a candidate's samples disagree with the trusted clock (the host may have got busier:
        the wider of the two is kept)."""
        if self._calibration is not None and not again:
            return self._calibration
        eager = self.baselines().eager
        per_call_ms = eager.median_ms if eager is not None and eager.median_ms > 0 else 1.0
        low, high = _CALIBRATION_CALLS
        calls = max(low, min(high, round(CALIBRATION_BUDGET_S * 1e3 / per_call_ms)))
        plan = CallPlan(warmup_ms=0.0, min_warmup_calls=2, min_repeats=calls, max_repeats=calls,
                        target_rel_stderr=0.0, max_time_s=float("inf"), sets=len(self.timing_sets),
                        seed_forward=self.problem.random)
        self._pool.settle()
        if again:  # within the candidate's timing stage
            run = self._metered(Timed.EAGER, plan, "calibrating the timing loop")
        else:
            with self._reporter().span(StageName.BASELINES):
                run = self._metered(Timed.EAGER, plan, "calibrating the timing loop")
        fresh = Calibration.from_calls(run.timed)
        self._calibration = fresh if self._calibration is None else self._calibration.widest(fresh)
        return self._calibration

    def compare(self, items: tuple[CompareItem, ...], directory: Path, fds: tuple[int, ...] = ()
                ) -> tuple[Compared, ...]:
        """The comparisons of a candidate's outputs (left in ``directory``, or in the memfds
        ``fds`` its items name) with the reference's."""
        reference = self._process_alive()
        try:
            reference.channel.send(
                CompareRequest(items=items, directory=directory, atol=self.problem.atol, rtol=self.problem.rtol),
                fds=fds)
            raw = reference.recv(timeout=self.options.timeouts.trial_s * max(1, len(items)))
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
