"""One attempt's candidate stage, step by step: load, correctness, integrity, then profile or timing.

`CandidateSteps.run` hands the candidate to its (fresh or prestarted) stage and walks the steps.
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
from harness.channel import ChannelClosed, ChannelTimeout
from harness.draft import (
    Draft,
    Outcome,
    TimingPlan,
    decisive_outcome,
    failed_trials,
    hardened_pick,
    kept_in_order,
    needs_second_run,
    torch_ops_detail,
    with_extension_check,
    with_timed_run,
    with_trial,
)
from harness.hardened import calls_made, dictated_calls
from harness.integrity import DECISIVE_FLAGS
from harness.options import Depth, HarnessOptions
from harness.progress import StageName, StageReporter
from harness.protocol import OpFailed, StartFailed, read_reply
from harness.protocol.candidate import (
    CandidateLoad,
    Loaded,
    ProfileReply,
    ProfileRequest,
    TimeReply,
    TimeRequest,
    TrialReply,
    TrialRequest,
)
from harness.protocol.reference import CompareItem
from harness.reference import ReferenceClient
from harness.seeds import TrialSpec, derive_seed
from harness.stagepool import StartedStage
from harness.verdict import ErrorKind, Stage, Status, Timing, Verdict
from harness.wire import JsonObject, WireError
from problems.spec import Policy, Problem

__all__ = ["CandidateSteps", "RunContext"]

#: The verdict message of a timing reply that is not one (what the timing step has always said).
MALFORMED_TIMING = "the timing stage sent a malformed reply"


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What a candidate run needs of its Referee."""

    problem: Problem
    options: HarnessOptions
    trials: tuple[TrialSpec, ...]
    secret: int
    reference: ReferenceClient
    #: Waits until no prestarted stage is starting up (`harness.stagepool.StagePool.settle`).
    settle: Callable[[StartedStage], None]
    #: The facts of the Referee's verdicts as they are now.
    facts: Callable[[], VerdictFacts]


class CandidateSteps:
    """One candidate in one stage (see the module's docstring).

    Args:
        context: the Referee's part.
        stage: the candidate stage (trusted until the load request hands it the candidate).
        source: the candidate's source.
        reporter: told of each step as it starts and ends.
    """

    def __init__(self, context: RunContext, stage: StartedStage, source: str, reporter: StageReporter) -> None:
        self.context = context
        self.options = context.options
        self.stage = stage
        self.process = stage.process
        self.source = source
        self.reporter = reporter
        self.workdir = stage.run_dir / "run"
        self.timeouts = context.options.timeouts

    # -- finishing ----------------------------------------------------------------------------
    def finish(self, draft: Draft, outcome: Outcome) -> Verdict:
        return assemble(self.context.facts(), draft, outcome)

    def fail(self, draft: Draft, outcome: Outcome) -> Verdict:
        """A verdict with the candidate stage's log."""
        return assemble(self.context.facts(), draft, outcome, log=self.process.log_tail(self.options.output_limit))

    def crashed(self, draft: Draft, stage: Stage, exc: Exception, what: str) -> Verdict:
        """The stage timed out or died during ``what``: killed, and the candidate's fault (the
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
    def plan(self, depth: Depth, baselines_eager_ms: float) -> TimingPlan:
        """The timing request: the options' (adaptive), or hardened with the calls it dictates."""
        timing = self.options.timing
        sets = tuple(t.index for t in self.context.trials if t.kind == "random")[: max(1, timing.input_sets)]
        hardened = self.options.hardened_timing and depth is Depth.BENCHMARK
        if hardened:
            timing = replace(timing, fixed_calls=dictated_calls(baselines_eager_ms, timing))
        return TimingPlan(request=timing, sets=sets, hardened=hardened)

    def run(self, draft: Draft) -> Verdict:
        """The steps, from ``draft`` (compiled, with its baselines) to the verdict."""
        try:
            return self._run(draft)
        finally:
            self.reporter.close()

    def _run(self, draft: Draft) -> Verdict:
        # The stage sees its own builds only: copies (marker and library) in its run directory.
        builds = self.stage.run_dir / "builds"
        for e in draft.compile.extensions if draft.compile is not None else ():
            if "/" not in e.name + e.key and ".." not in e.name + e.key:
                # The builder's build for what the builder built: a compile stage's build of the same
                # key (a plant, possibly) never stands in for it.
                copy_build(self.options.builds_dir, e.name, e.key, builds, trusted=e.by_builder)
        (self.stage.run_dir / "candidate.py").write_text(self.source)
        eager = draft.baselines.eager if draft.baselines is not None else None
        plan = self.plan(draft.depth, eager.median_ms if eager is not None else 0.0)
        overheads: list[float] = []
        self.context.settle(self.stage)
        if plan.hardened:
            # The loop's overhead, measured before the candidate's code is loaded (a candidate could
            # burn the CPU to inflate it), now and again once its stage is gone.
            overheads.append(self.context.reference.loop_overhead(plan.request, plan.sets))
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
            return self.timing(draft, plan, overheads)

    def load(self, draft: Draft) -> Draft | Verdict:
        """Hand the candidate to the stage: it loads its builds and builds ``ModelNew``."""
        self.reporter.enter(StageName.LOAD)
        context, run_dir = self.context, self.stage.run_dir
        request = CandidateLoad(
            workdir=self.workdir, problem=context.problem, target=context.reference.target,
            candidate_path=run_dir / "candidate.py", builds_dir=run_dir / "builds", arch_list=self.options.arch_list,
            transport=context.reference.transport, init_seed=derive_seed(context.secret, "init"),
            weights_seed=derive_seed(context.secret, "weights"), trials=context.trials)
        try:
            self.stage.wait_ready(self.timeouts.load_s)
            raw = self.process.request(request, timeout=self.timeouts.load_s)
        except (ChannelTimeout, ChannelClosed) as exc:
            return self.crashed(draft, Stage.LOAD, exc, "loading the candidate")
        try:
            loaded = Loaded.from_reply(raw)
        except WireError:
            return self.malformed(draft, Stage.LOAD, "the candidate stage sent a malformed reply to its load")
        if isinstance(loaded, StartFailed):
            return self.fail(draft, Outcome(Status.ERROR, Stage.LOAD, f"{loaded.message}:\n{loaded.errors}",
                                            ErrorKind.CANDIDATE))
        return replace(draft, extensions=loaded.extensions)

    def _trial(self, request: TrialRequest) -> JsonObject:
        return self.process.request(request, timeout=self.timeouts.trial_s)

    def correctness(self, draft: Draft) -> Draft | Verdict:
        """Every trial, each output compared in the reference process."""
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
                                      f"the candidate stage sent a malformed reply in trial {trial.index}")
            if isinstance(reply, OpFailed):
                return self.fail(replace(draft, trials=so_far.trials), Outcome(
                    Status.ERROR, Stage.CORRECTNESS, f"forward raised in trial {trial.index}:\n{reply.error}",
                    ErrorKind.CANDIDATE))
            (result,) = self.context.reference.compare((CompareItem(index=trial.index, output=reply.output),),
                                                       self.workdir)
            so_far = with_trial(so_far, trial, reply, result, pure=pure)
        failed = failed_trials(so_far)
        return self.fail(so_far, failed) if failed is not None else so_far

    def integrity(self, draft: Draft) -> Draft | Verdict:
        """The extension must do real work (mixed policy: the no-op substitution trial), and no
        decisive flag may be up (TF32 on, inputs mutated, work left running, torch in a pure forward)."""
        noop_passed: bool | None = None
        if draft.extensions and self.context.problem.policy is not Policy.PURE:
            try:
                raw = self._trial(TrialRequest(index=0, noop=True))
            except (ChannelTimeout, ChannelClosed) as exc:
                return self.crashed(draft, Stage.INTEGRITY, exc, "the no-op substitution trial")
            try:
                reply = read_reply(raw, TrialReply.read, "the no-op trial's reply")
            except WireError:
                return self.malformed(draft, Stage.INTEGRITY,
                                      "the candidate stage sent a malformed reply in the no-op substitution trial")
            if not isinstance(reply, OpFailed):
                (result,) = self.context.reference.compare((CompareItem(index=0, output=reply.output),), self.workdir)
                noop_passed = result.passed
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
            return self.malformed(draft, Stage.TIMING, "the profiling stage sent a malformed reply")
        if isinstance(reply, OpFailed):
            return self.fail(draft, Outcome(Status.ERROR, Stage.TIMING,
                                            f"forward raised while profiled:\n{reply.error}", ErrorKind.CANDIDATE))
        self.process.close()
        return self.finish(replace(draft, profile=reply.kernels),
                           Outcome(Status.PASS, Stage.DONE, "correct and profiled"))

    def _time_once(self, draft: Draft, plan: TimingPlan, first_call: int) -> tuple[Draft, Timing, float] | Verdict:
        """One timing run: rotating input sets, outputs re-checked, bounded by our own clock."""
        started = time.perf_counter()
        try:
            raw = self.process.request(TimeRequest(timing=plan.request, sets=plan.sets, first_call=first_call),
                                       timeout=self.timeouts.timing_s)
        except (ChannelTimeout, ChannelClosed) as exc:
            return self.crashed(draft, Stage.TIMING, exc, "timing")
        wall_s = time.perf_counter() - started
        try:
            reply = read_reply(raw, TimeReply.read, "the timing reply")
        except WireError:
            return self.malformed(draft, Stage.TIMING, MALFORMED_TIMING)
        if isinstance(reply, OpFailed):
            return self.fail(draft, Outcome(Status.ERROR, Stage.TIMING, f"forward raised while timed:\n{reply.error}",
                                            ErrorKind.CANDIDATE))
        # Every input set re-checked (the calls after the timed ones cover each), no other.
        match = kept_in_order(plan, reply, first_call) and all(
            r.passed for r in self.context.reference.compare(tuple(k.to_compare() for k in reply.kept), self.workdir))
        return with_timed_run(draft, reply, wall_s, outputs_match=match), reply.timing, wall_s

    def timing(self, draft: Draft, plan: TimingPlan, overheads: list[float]) -> Verdict:
        """The timing loop. Hardened: a second run (call ids continued: no input repeats) only if
        the first looks out of bounds, for an honest run hit by a burst of load on the host; one
        must fit the trusted clock."""
        runs: list[tuple[Timing, float]] = []
        first_call = 0
        for _ in range(2 if plan.hardened else 1):
            timed = self._time_once(draft, plan, first_call)
            if isinstance(timed, Verdict):
                return timed
            draft, timing, wall_s = timed
            runs.append((timing, wall_s))
            first_call += calls_made(plan.request, plan.sets) if plan.hardened else 0
            if not needs_second_run(draft, plan, timing, wall_s, overheads[0] if overheads else 0.0):
                break
        self.process.close()
        detail = ""
        if plan.hardened and not any(f in DECISIVE_FLAGS for f in draft.flags):
            overheads.append(self.context.reference.loop_overhead(plan.request, plan.sets))
            draft, timing, detail = hardened_pick(draft, plan, tuple(runs), max(overheads))
        outcome = decisive_outcome(draft, Stage.INTEGRITY, detail)
        if outcome is not None:
            return self.fail(replace(draft, timing=timing if timing.samples_ms else None), outcome)
        verdict = self.finish(replace(draft, timing=timing),
                              Outcome(Status.PASS, Stage.DONE, "correct and timed" + detail))
        return quarantine(verdict, self.options.suspicious_speedup)
