"""One attempt's candidate sandbox, step by step: load, correctness, integrity, then profile or timing.

`CandidateSteps.run` hands the candidate to its (fresh or prestarted) sandbox and walks the steps.
Each step takes the frozen `Draft` the last one left and returns a new one or the finished
`Verdict`; what a step makes of a reply is a pure function of `harness.draft`. Replies are read
where they enter (`harness.protocol.candidate`): a malformed one is the candidate's fault. Outputs
are compared in the reference (`harness.reference.ReferenceClient.compare`), never here.
Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from harness.assembly import VerdictFacts, assemble, quarantine
from harness.buildcache import copy_build
from harness.buildcache.records import BuildAnswer
from harness.channel import ChannelClosed, ChannelTimeout, SandboxMessage
from harness.draft import (
    Draft,
    Outcome,
    decisive_outcome,
    failed_trials,
    metered_failure,
    torch_ops_detail,
    with_extension_check,
    with_flags,
    with_kernel_errors,
    with_loaded,
    with_metered_run,
    with_trial,
)
from harness.lazybuilds import LazyBuilds, lazy_where
from harness.meter.build import install_meter
from harness.meter.clock import Calibration, ClockCheck, check_clock
from harness.meter.drive import AuditedOutput, CallPlan, MeteredRun, drive
from harness.meter.noise import timing_of
from harness.options import HarnessOptions
from harness.progress import StageReporter
from harness.protocol import OpFailed, StartFailed, read_reply
from harness.protocol.build import Delegation
from harness.protocol.candidate import (
    CandidateLoad,
    Loaded,
    ProfileReply,
    ProfileRequest,
    TimeRequest,
    TrialReply,
    TrialRequest,
)
from harness.protocol.meter import CallInputs, MeterEnd, Metering
from harness.protocol.reference import CompareItem
from harness.reference import ReferenceClient
from harness.sandboxpool import StartedSandbox
from harness.seeds import TrialSpec, derive_seed
from problems.spec import Policy, Problem
from vocabulary.evaluation import Depth, Target
from vocabulary.flags import DECISIVE_FLAGS, Flag
from vocabulary.stages import StageName
from vocabulary.timing import ClockBound
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from vocabulary.wire import JsonObject, WireError

__all__ = ["CandidateSteps", "RunContext"]

#: Metered runs of one candidate at most, each twice as long as the one before: another only when
#: the last disagreed with the trusted clock even against a fresh calibration (an honest run on a
#: host loaded until none of its calls ran through: more calls, more chances of one that did).
_METERED_RUNS = 3

#: The verdict message of a timing reply that is not one (what the timing step has always said).
MALFORMED_TIMING = "the candidate sandbox sent a malformed reply to its timing"
#: Audited outputs sent to the comparer in one request (each is a memfd: a message carries at most
#: `harness.channel.MAX_FRAME_FDS`, and the kernel's own limit is 253).
_AUDITS_PER_COMPARE = 64
#: The least a step waits for its reply after a lazy build (its own time may be all spent).
_MIN_WAIT_S = 0.05


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What a candidate run needs of its Referee."""

    problem: Problem
    options: HarnessOptions
    trials: tuple[TrialSpec, ...]
    secret: int
    reference: ReferenceClient
    #: Waits until no prestarted sandbox is starting up (`harness.sandboxpool.SandboxPool.settle`).
    settle: Callable[[StartedSandbox], None]
    #: The facts of the Referee's verdicts as they are now.
    facts: Callable[[], VerdictFacts]
    #: Builds one lazy build in the trusted builder (`harness.compiler.CompileClient.build_lazily`).
    build: Callable[[JsonObject | None], BuildAnswer] | None = None


class CandidateSteps:
    """One candidate in one sandbox (see the module's docstring).

    Args:
        context: the Referee's part.
        sandbox: the candidate sandbox (trusted until the load request hands it the candidate).
        source: the candidate's source.
        reporter: told of each step as it starts and ends.
    """

    def __init__(self, context: RunContext, sandbox: StartedSandbox, source: str, reporter: StageReporter) -> None:
        self.context = context
        self.options = context.options
        self.sandbox = sandbox
        self.process = sandbox.process
        self.source = source
        self.reporter = reporter
        self.workdir = sandbox.run_dir / "run"
        self.timeouts = context.options.timeouts
        #: The builds the sandbox asks for as it runs (`harness.lazybuilds`).
        self.lazy = LazyBuilds(context.build, context.options.builds_dir, sandbox.run_dir / "builds")

    # -- finishing ----------------------------------------------------------------------------
    def finish(self, draft: Draft, outcome: Outcome) -> Verdict:
        return assemble(self.context.facts(), replace(draft, compile=self.lazy.merged(draft.compile)), outcome)

    def fail(self, draft: Draft, outcome: Outcome) -> Verdict:
        """A verdict with the candidate sandbox's log."""
        return assemble(self.context.facts(), replace(draft, compile=self.lazy.merged(draft.compile)), outcome,
                        log=self.process.log_tail(self.options.output_limit))

    def _ask(self, message: SandboxMessage, timeout: float) -> JsonObject:
        """Send a request and wait for its reply, serving the lazy builds the sandbox asks for on the
        way (`harness.lazybuilds`): the time they take is never charged to ``timeout``."""
        started = time.perf_counter()
        building = 0.0
        raw = self.process.request(message, timeout=timeout)
        while (delegation := Delegation.parse(raw)) is not None:
            before = time.perf_counter()
            answer = self.lazy.serve(delegation)
            building += time.perf_counter() - before
            left = timeout - (time.perf_counter() - started - building)
            raw = self.process.request(answer, timeout=max(_MIN_WAIT_S, left))
        return raw

    def _build_failed(self, draft: Draft) -> Verdict | None:
        """A compile error if a lazy build failed and the candidate did not catch it (the request
        it was in failed too)."""
        failed = self.lazy.propagated
        if not failed:
            return None
        outcome = Outcome(Status.ERROR, Stage.COMPILE, f"extension {failed[0].name!r} failed to build "
                          f"({lazy_where(failed[0].lazy)})", ErrorKind.CANDIDATE)
        return assemble(self.context.facts(), replace(draft, compile=self.lazy.merged(draft.compile)), outcome,
                        log="\n".join(f.errors for f in failed))

    def crashed(self, draft: Draft, stage: Stage, exc: Exception, what: str) -> Verdict:
        """The sandbox timed out or died during ``what``: killed, and the candidate's fault (the
        verdict keeps what the steps before decided, not the flags)."""
        if isinstance(exc, ChannelTimeout):
            reason = f"{what} timed out"
        else:
            reason = f"{what}: the candidate process {self.process.describe_exit()}"
        self.process.kill()
        return self.fail(replace(draft, flags=()), Outcome(Status.ERROR, stage, reason, ErrorKind.CANDIDATE))

    def malformed(self, draft: Draft, stage: Stage, what: str) -> Verdict:
        return self.fail(draft, Outcome(Status.ERROR, stage, what, ErrorKind.CANDIDATE))

    # -- the run --------------------------------------------------------------------------------
    def run(self, draft: Draft) -> Verdict:
        """The steps, from ``draft`` (compiled, with its baselines) to the verdict."""
        try:
            return self._run(draft)
        finally:
            self.reporter.close()

    def _run(self, draft: Draft) -> Verdict:
        # The sandbox sees its own builds only: copies (marker and library) in its run directory.
        builds = self.sandbox.run_dir / "builds"
        for e in draft.compile.extensions if draft.compile is not None else ():
            if "/" not in e.name + e.key and ".." not in e.name + e.key:
                # The builder's build for what the builder built: a compile sandbox's build of the same
                # key (a plant, possibly) never stands in for it.
                copy_build(self.options.builds_dir, e.name, e.key, builds, trusted=e.by_builder)
        (self.sandbox.run_dir / "candidate.py").write_text(self.source)
        self.meter_path = install_meter(self.options.builds_dir, self.sandbox.run_dir)
        # The loop's own cost on this host was measured with the baselines, before the candidate's
        # code was loaded (`harness.Referee.baselines`): its code could burn the CPU meanwhile.
        self.context.settle(self.sandbox)
        with self.process:
            draft = replace(draft, sandbox=self.process.sandbox_report)
            for step in (self.load, self.correctness, self.integrity):
                result = step(draft)
                if isinstance(result, Verdict):
                    return result
                draft = result
            if draft.depth is Depth.CORRECTNESS:
                self.process.close()
                return self.finish(draft, Outcome(Status.PASS, Stage.CORRECTNESS, "correct (not timed)"))
            self.reporter.enter(StageName.TIMING)  # or the profile
            if draft.depth is Depth.PROFILE:
                return self.profile(draft)
            return self.timing(draft)

    def load(self, draft: Draft) -> Draft | Verdict:
        """Hand the candidate to the sandbox: it loads its builds and builds ``ModelNew``."""
        self.reporter.enter(StageName.LOAD)
        context, run_dir = self.context, self.sandbox.run_dir
        request = CandidateLoad(
            workdir=self.workdir, problem=context.problem, target=context.reference.target,
            candidate_path=run_dir / "candidate.py", builds_dir=run_dir / "builds", meter_path=self.meter_path,
            arch_list=self.options.arch_list,
            transport=context.reference.transport, init_seed=derive_seed(context.secret, "init"),
            weights_seed=derive_seed(context.secret, "weights"), trials=context.trials)
        try:
            self.sandbox.wait_ready(self.timeouts.load_s)
            raw = self._ask(request, self.timeouts.load_s)
        except (ChannelTimeout, ChannelClosed) as exc:
            return self.crashed(draft, Stage.LOAD, exc, "loading the candidate")
        try:
            loaded = Loaded.from_reply(raw)
        except WireError:
            return self.malformed(draft, Stage.LOAD, "the candidate sandbox sent a malformed reply to its load")
        self.lazy.settle(ok=not isinstance(loaded, StartFailed))
        if isinstance(loaded, StartFailed):
            return self._build_failed(draft) or self.fail(draft, Outcome(
                Status.ERROR, Stage.LOAD, f"{loaded.message}:\n{loaded.errors}", ErrorKind.CANDIDATE))
        return with_loaded(draft, loaded)

    def _trial(self, request: TrialRequest) -> JsonObject:
        return self._ask(request, self.timeouts.trial_s)

    def correctness(self, draft: Draft) -> Draft | Verdict:
        """The trials in turn, each output compared in the reference process, until one fails or
        raises a decisive flag: the verdict is settled there, and the lane's time is not spent on
        the rest."""
        self.reporter.enter(StageName.CORRECTNESS)
        pure = self.context.problem.policy is Policy.PURE
        so_far = draft
        for trial in self.context.trials:
            try:
                raw = self._trial(TrialRequest(index=trial.index, record_ops=pure and trial.index == 0))
            except (ChannelTimeout, ChannelClosed) as exc:
                return self.crashed(draft, Stage.CORRECTNESS, exc, f"trial {trial.index}")
            try:
                reply = read_reply(raw, TrialReply.read, f"trial {trial.index}'s reply")
            except WireError:
                return self.malformed(replace(draft, trials=so_far.trials), Stage.CORRECTNESS,
                                      f"the candidate sandbox sent a malformed reply in trial {trial.index}")
            self.lazy.settle(ok=not isinstance(reply, OpFailed))
            if isinstance(reply, OpFailed):
                so_far = replace(draft, trials=so_far.trials, kernel_errors=so_far.kernel_errors)
                return self._build_failed(so_far) or self.fail(so_far, Outcome(
                    Status.ERROR, Stage.CORRECTNESS, f"forward raised in trial {trial.index}:\n{reply.error}",
                    ErrorKind.CANDIDATE))
            (result,) = self.context.reference.compare((CompareItem(index=trial.index, output=reply.output),),
                                                       self.workdir)
            so_far = with_trial(so_far, trial, reply, result, pure=pure)
            if not result.passed or any(f in DECISIVE_FLAGS for f in so_far.flags):
                break
        failed = failed_trials(so_far, len(self.context.trials))
        return self.fail(so_far, failed) if failed is not None else so_far

    def integrity(self, draft: Draft) -> Draft | Verdict:
        """The extension must do real work (mixed policy: the no-op substitution trial), and no
        decisive flag may be up (TF32 on, inputs mutated, work left running, torch in a pure forward)."""
        noop_passed: bool | None = None
        # The extensions built lazily in a forward count as loaded too.
        draft = replace(draft, extensions=tuple(dict.fromkeys((*draft.extensions, *self.lazy.extension_names()))))
        if draft.extensions and self.context.problem.policy is not Policy.PURE:
            try:
                raw = self._trial(TrialRequest(index=0, noop=True))
            except (ChannelTimeout, ChannelClosed) as exc:
                return self.crashed(draft, Stage.INTEGRITY, exc, "the no-op substitution trial")
            try:
                reply = read_reply(raw, TrialReply.read, "the no-op trial's reply")
            except WireError:
                return self.malformed(draft, Stage.INTEGRITY,
                                      "the candidate sandbox sent a malformed reply in the no-op substitution trial")
            self.lazy.settle(ok=True)  # a no-op trial that raised only says the extension did work
            if not isinstance(reply, OpFailed):
                (result,) = self.context.reference.compare((CompareItem(index=0, output=reply.output),), self.workdir)
                noop_passed = result.passed
                draft = with_kernel_errors(draft, reply.kernel_errors, trial=0, noop=True)
        draft = with_extension_check(draft, noop_passed=noop_passed)
        outcome = decisive_outcome(draft, Stage.INTEGRITY, torch_ops_detail(draft))
        return self.fail(draft, outcome) if outcome is not None else draft

    def profile(self, draft: Draft) -> Verdict:
        """Per-kernel totals from the torch profiler instead of timing."""
        try:
            raw = self.process.request(ProfileRequest(), timeout=self.timeouts.timing_s)
        except (ChannelTimeout, ChannelClosed) as exc:
            return self.crashed(draft, Stage.TIMING, exc, "profiling")
        try:
            reply = read_reply(raw, ProfileReply.read, "the profile reply")
        except WireError:
            return self.malformed(draft, Stage.TIMING, "the candidate sandbox sent a malformed reply to its profiling")
        if isinstance(reply, OpFailed):
            return self.fail(draft, Outcome(Status.ERROR, Stage.TIMING,
                                            f"forward raised while profiled:\n{reply.error}", ErrorKind.CANDIDATE))
        self.process.close()
        return self.finish(replace(draft, profile=reply.kernels),
                           Outcome(Status.PASS, Stage.DONE, "correct and profiled"))

    def _metered(self, draft: Draft, plan: CallPlan, first_call: int) -> tuple[MeteredRun, MeterEnd | None] | Verdict:
        """One metered run of the candidate, driven from here (`harness.meter.drive`)."""
        limit_s = self.timeouts.timing_s
        reference = self.context.reference
        try:
            raw = self.process.request(TimeRequest(sets=reference.timing_sets, flush=self.options.timing.flush_cache),
                                       timeout=limit_s)
            if not Metering.is_metering(raw):
                failed = read_reply(raw, MeterEnd.read, "the timing reply")
                error = failed.error if isinstance(failed, OpFailed) else "no metered loop"
                return self.fail(draft, Outcome(Status.ERROR, Stage.TIMING, f"timing could not start:\n{error}",
                                                ErrorKind.CANDIDATE))
            run = drive(self.process.channel, plan, timeout_s=limit_s, first_call=first_call)
            if run.protocol_error is not None or run.message is not None:
                self.process.kill()  # its state is unknown: nothing more is asked of it
                if run.protocol_error is None:
                    run = replace(run, protocol_error="a message in the middle of the timing loop")
                return run, None
            reply = read_reply(self.process.recv(timeout=limit_s), MeterEnd.read, "the timing loop's end")
        except (ChannelTimeout, ChannelClosed) as exc:
            return self.crashed(draft, Stage.TIMING, exc, "timing")
        except WireError:
            return self.malformed(draft, Stage.TIMING, MALFORMED_TIMING)
        if isinstance(reply, OpFailed):
            run.close()
            return self.fail(draft, Outcome(Status.ERROR, Stage.TIMING, f"the timing loop failed:\n{reply.error}",
                                            ErrorKind.CANDIDATE))
        return run, reply

    def _audits_match(self, audits: tuple[AuditedOutput, ...]) -> bool:
        """Whether every audited output matches what the reference computes for its call."""
        if not audits:
            return True
        sets = self.context.reference.timing_sets
        for start in range(0, len(audits), _AUDITS_PER_COMPARE):
            batch = audits[start:start + _AUDITS_PER_COMPARE]
            items = tuple(CompareItem(index=sets[a.call.input_set], output={**a.description, "kind": "memfd", "fd": i},
                                      call=CallInputs(input_seed=a.call.input_seed, forward_seed=a.call.forward_seed))
                          for i, a in enumerate(batch))
            results = self.context.reference.compare(items, self.workdir, tuple(a.fd for a in batch))
            if not all(r.passed for r in results):
                return False
        return True

    def _calibrated_again(self) -> Calibration:
        """The loop's cost measured again with the candidate's processes stopped: threads it left
        spinning would load the host the calibration measures, and widen what its next run is
        allowed. Where its tree cannot be stopped, the calibration stays as it was."""
        reference = self.context.reference
        with self.process.paused() as alone:
            return reference.calibration(again=alone)

    def timing(self, draft: Draft) -> Verdict:
        """The metered timing loop: the trusted side picks each call's inputs, times its round
        trip and audits calls it picks after they returned. A run whose samples the trusted clock
        does not explain is checked against a fresh calibration, then run again, twice as long,
        up to `_METERED_RUNS` runs; the last one's disagreement fails (``clock_disagrees``)."""
        reference = self.context.reference
        plan = CallPlan.from_timing(self.options.timing, len(reference.timing_sets), audits=True,
                                    seed_forward=self.context.problem.random)
        check: ClockCheck | None = None
        run: MeteredRun | None = None
        for _ in range(_METERED_RUNS):
            metered = self._metered(draft, plan, len(run.calls) if run is not None else 0)
            if isinstance(metered, Verdict):
                return metered
            run, end = metered
            try:
                match = end is None or self._audits_match(run.audits)
            finally:
                run.close()
            draft = with_metered_run(draft, run, end, audits_match=match)
            failed = metered_failure(run)
            if failed is not None:
                return self.fail(draft, failed)
            if any(f in DECISIVE_FLAGS for f in draft.flags):
                break
            check = check_clock(run.timed, reference.calibration())
            if not check.agrees:
                check = check_clock(run.timed, self._calibrated_again())
            if check.agrees:
                break
            plan = plan.longer(len(run.timed))
        self.process.close()
        assert run is not None
        cuda = reference.target is Target.CUDA
        timing = timing_of([c.sample_ms for c in run.timed], cuda=cuda) if run.timed else None
        if check is not None and timing is not None:
            timing = replace(timing, bound=ClockBound(overhead_ms=check.overhead_ms, excess_ms=check.excess_ms,
                                                      allowed_ms=check.allowed_ms, calls=check.calls,
                                                      audits=len(run.audits)))
            if not check.agrees:
                draft = replace(with_flags(draft, Flag.CLOCK_DISAGREES), details=(*draft.details, check.detail()))
        outcome = decisive_outcome(draft, Stage.INTEGRITY)
        if outcome is not None:
            return self.fail(replace(draft, timing=timing), outcome)
        done = "correct and timed" + (" (re-judged in a fresh process with fresh seeds)"
                                      if self.options.rejudge else "")
        verdict = self.finish(replace(draft, timing=timing), Outcome(Status.PASS, Stage.DONE, done))
        return quarantine(verdict, self.options.suspicious_speedup,
                          roofline_trusted=self.context.reference.roofline_trusted)

