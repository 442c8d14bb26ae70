"""The referee: `Referee` evaluates candidates for one problem on one target; `evaluate` once.

`Referee` is a façade over the parts of an evaluation, one module each: the sandboxes
(`harness.sandboxpool`), the trusted reference (`harness.reference`), the compile
(`harness.compiler`), the candidate's steps (`harness.candidaterun`, judging with the pure
`harness.draft`) and the verdict (`harness.assembly`). This module is stdlib only: the process
driving evaluations (a worker, the CLI) never imports torch or initialises CUDA.
"""

from __future__ import annotations

import contextlib
import os
import platform
import secrets
import shutil
import threading
import weakref
from collections.abc import Sequence
from dataclasses import replace

from harness.assembly import VerdictFacts, assemble
from harness.candidaterun import CandidateSteps, RunContext
from harness.compiler import PCH_FLAG_SETS, CompileClient
from harness.draft import Draft, Outcome
from harness.hints import static_hints
from harness.options import HarnessOptions
from harness.progress import StageListener, StageReporter
from harness.protocol.build import HeaderFlags
from harness.protocol.reference import ReferenceInfo
from harness.reference import ReferenceClient, ReferenceFailed
from harness.sandbox import kill_all_sandboxes, protect_current_process
from harness.sandboxpool import CANCELLED_MESSAGE, SandboxPool, SandboxRole
from harness.seeds import new_secret, plan_trials, secret_identity
from harness.toolchain import cuda_unavailable
from problems.spec import Problem, parse_problem
from vocabulary.builds import CompileResult
from vocabulary.devices import DeviceSpecs
from vocabulary.evaluation import Depth, Target
from vocabulary.provenance import HARNESS_VERSION
from vocabulary.stages import StageEvent, StagePhase, StageSeconds
from vocabulary.timing import Baselines
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict

__all__ = ["CANCELLED_MESSAGE", "HARNESS_VERSION", "Referee", "ReferenceFailed", "cancel_all", "evaluate",
           "warm_headers"]

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


#: A compile-only pass that built nothing: a build in ``__init__`` or a forward happens when it runs.
_COMPILED_NOTHING = ("compiled (no extension was built at import: one built in ModelNew.__init__ or in forward is "
                     "built, by the same builder, when the candidate runs)")


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
        self.trials = tuple(plan_trials(
            self._secret, trials=self.options.trials, input_variants=problem.input_variants,
            extra_shapes=problem.trial_shapes(self.target.value),
        ))
        self._problem_failed = False
        #: Seconds per stage of the evaluation in flight, per thread (`Verdict.stage_seconds`).
        self._tallies = threading.local()
        for path in (self.options.builds_dir, self.options.baselines_dir, self.options.runs_dir):
            path.mkdir(parents=True, exist_ok=True)
        #: This Referee's run directories (its reference's and its attempts'): its problem sandboxes
        #: see this one and no other job's.
        self.runs_root = self.options.runs_dir / f"referee-{secrets.token_hex(8)}"
        self.runs_root.mkdir()
        self._pool = SandboxPool(self.options, self.target, self.runs_root)
        self._reference = ReferenceClient(problem, self.target, self.options, trials=self.trials,
                                          secret=self._secret, pool=self._pool, reporter=self._reporter)
        self._compiler = CompileClient(self.options, self.target, self._pool, self._reporter)
        _LIVE_REFEREES.add(self)
        protect_current_process()

    def _reporter(self) -> StageReporter:
        return StageReporter(self._heard)

    def _heard(self, event: StageEvent) -> None:
        """A stage event: tallied for the evaluation in flight in this thread (a worker compiles in
        its trajectories' threads while the lane evaluates), and passed on to ``on_stage``."""
        tally: dict[str, float] | None = getattr(self._tallies, "current", None)
        if event.phase is StagePhase.FINISHED and tally is not None:
            tally[event.stage.value] = tally.get(event.stage.value, 0.0) + event.seconds
        if self.on_stage is not None:
            self.on_stage(event)

    # -- life cycle -----------------------------------------------------------------------
    def close(self) -> None:
        """End every sandbox (a later evaluation starts the reference again)."""
        self._pool.close()
        self._reference.close()
        with contextlib.suppress(OSError):  # only if nothing was kept to debug
            self.runs_root.rmdir()

    def __enter__(self) -> Referee:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cancel(self) -> None:
        """Stop for good, from any thread: every sandbox of this Referee (reference,
        compile, builder, candidate, prestarted ones) is killed with its process tree, so the
        evaluation in flight returns soon after with an error verdict (``cancelled``),
        releasing whatever lock its caller holds; later evaluations return one at once."""
        self._pool.cancel()

    @property
    def cancelled(self) -> bool:
        return self._pool.cancelled

    @property
    def prestarted(self) -> dict[str, int]:
        """The sandboxes started ahead for the next attempt: their pids (the wardens'), by role."""
        return self._pool.prestarted

    # -- the reference ----------------------------------------------------------------------
    def start_reference(self) -> ReferenceInfo:
        """Start the reference process (idempotent); returns its specs, FLOPs and environment.

        Raises:
            ReferenceFailed: the problem's code failed (``kind`` `ErrorKind.PROBLEM`) or ours did
                (`ErrorKind.INFRA`, also a cancel): `harness.reference.ReferenceClient.start`.
        """
        return self._reference.start()

    @property
    def reference_info(self) -> ReferenceInfo | None:
        """What the started reference knows (None before it started)."""
        return self._reference.info

    @property
    def roofline_trusted(self) -> bool:
        """Whether a time under the started reference's roofline quarantines a candidate (on the
        CPU, not while this machine's peak rates were only ever measured on a loaded host)."""
        return self._reference.roofline_trusted

    @property
    def device_specs(self) -> DeviceSpecs:
        """``get_gpu_specs()`` of the agent: the device the reference runs on."""
        return self.start_reference().specs

    def baselines(self) -> Baselines:
        """Eager and torch.compile timings of the reference, cached by full provenance, and the
        timing loop's cost on this host (`harness.reference.ReferenceClient.calibration`)."""
        baselines = self._reference.baselines()
        self._reference.calibration()
        return baselines

    def baseline_key(self) -> str:
        """The key of this Referee's baselines in the cache (``baselines/<key>.json``)."""
        return self._reference.baseline_key()

    # -- the compile --------------------------------------------------------------------------
    def compile(self, source: str) -> CompileResult:
        """Import the candidate with no GPU visible, building its extensions into the cache; the
        same source seen before by this Referee, its builds still in the cache, needs no sandbox."""
        return self._compiler.compile(source)

    def warm_headers(self, flag_sets: Sequence[HeaderFlags] | None = None) -> bool:
        """Build the precompiled torch headers of ``flag_sets`` (default: every common set of the
        target) in a sandbox that runs trusted code only (`harness.compiler.CompileClient.warm_headers`).

        Returns:
            Whether the headers are in place.
        """
        return self._compiler.warm_headers(flag_sets)

    # -- the evaluation ------------------------------------------------------------------
    def _facts(self) -> VerdictFacts:
        info = self._reference.info
        return VerdictFacts(
            target=self.target, problem_sha256=self.problem.sha256, mode=self.problem.mode.value,
            policy=self.problem.policy.value, atol=self.problem.atol, rtol=self.problem.rtol,
            trials=len(self.trials), seeds=secret_identity(self._secret), rejudge=self.options.rejudge,
            transport=self._reference.transport, reference=info, python=platform.python_version(),
            host=platform.node(), pid=os.getpid(), output_limit=self.options.output_limit)

    def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
        """Compile, check and time one candidate.

        Args:
            source: the candidate's Python source (defines ``ModelNew``).
            depth: stop after the compile or the correctness stage, time (the default), or profile.

        Returns:
            The `Verdict`; failures of the candidate or of our infrastructure are values in it.
        """
        depth = Depth(depth)
        tally: dict[str, float] = {}
        self._tallies.current = tally
        try:
            # The candidate sandbox starts up while this compiles (a builder only if one was started
            # for this attempt: starting one now would compete with the attempt's own sandboxes).
            self._pool.prestart(builder=False)
            verdict = self._evaluate(source, depth) if not self.cancelled else None
        except OSError:
            if not self.cancelled:
                raise
            verdict = None  # a descriptor the cancel closed under this evaluation: the cancel's
        finally:
            if not self._problem_failed:  # no next attempt after the problem's own code failed
                self._pool.prestart()  # the next attempt's sandboxes, while the agent writes it
        if verdict is None or self.cancelled:  # whatever the killed sandboxes made of it
            verdict = assemble(self._facts(), Draft(depth=depth), Outcome(
                Status.ERROR, Stage.PROBLEM if verdict is None else verdict.stage, CANCELLED_MESSAGE,
                ErrorKind.CANCELLED))
        self._tallies.current = None
        return verdict.with_changes(stage_seconds=StageSeconds(**tally))

    def _evaluate(self, source: str, depth: Depth) -> Verdict:
        draft = Draft(depth=depth, hints=tuple(static_hints(source, target=self.target.value)))
        # The machine's fault, not the candidate's: said before any compile. A compile-only
        # evaluation needs the toolkit alone (CUDA compiles on a box without a GPU).
        unavailable = cuda_unavailable(gpu=depth is not Depth.COMPILE) if self.target is Target.CUDA else None
        if unavailable:
            return assemble(self._facts(), draft, Outcome(Status.ERROR, Stage.COMPILE, unavailable, ErrorKind.INFRA))
        compiled = self.compile(source)
        draft = replace(draft, compile=compiled)
        if not compiled.ok:
            return assemble(self._facts(), draft, Outcome(Status.ERROR, Stage.COMPILE, "compile failed",
                                                          ErrorKind.CANDIDATE), log=compiled.errors)
        if depth is Depth.COMPILE:
            return assemble(self._facts(), draft, Outcome(Status.PASS, Stage.COMPILE, "compiled" if compiled.extensions
                                                          else _COMPILED_NOTHING))
        try:
            self.start_reference()
            baselines = self.baselines() if depth is Depth.BENCHMARK else None
        except ReferenceFailed as exc:
            self._problem_failed = exc.kind is ErrorKind.PROBLEM
            return assemble(self._facts(), draft, Outcome(Status.ERROR, Stage.PROBLEM, str(exc), exc.kind),
                            log=exc.details)
        prepared = self._pool.take(SandboxRole.CANDIDATE)
        context = RunContext(problem=self.problem, options=self.options, trials=self.trials, secret=self._secret,
                             reference=self._reference, settle=self._pool.settle, facts=self._facts,
                             build=self._compiler.build_lazily)
        try:
            steps = CandidateSteps(context, prepared, source, self._reporter())
            verdict = steps.run(replace(draft, baselines=baselines))
        except ReferenceFailed as exc:
            verdict = assemble(self._facts(), draft, Outcome(Status.ERROR, Stage.CORRECTNESS, str(exc),
                                                             ErrorKind.INFRA), log=exc.details)
        finally:
            prepared.process.kill()
            self._compiler.release_builder()  # kept for the attempt's lazy builds only
        if verdict.status is not Status.ERROR:
            shutil.rmtree(prepared.run_dir, ignore_errors=True)  # outputs can be large; keep failures to debug
        return verdict


#: Every Referee of this process not yet collected (`cancel_all`).
_LIVE_REFEREES: weakref.WeakSet[Referee] = weakref.WeakSet()


def cancel_all() -> None:
    """Cancel every Referee of this process and kill any other sandbox it started (admission): a
    worker about to exit (its supervisor died, it was told to stop) leaves no sandbox behind, and
    the evaluations in flight end as cancelled rather than as the candidates' crashes."""
    for referee in list(_LIVE_REFEREES):
        referee.cancel()
    kill_all_sandboxes()


def evaluate(problem: Problem, candidate_source: str, target: Target | str = Target.CUDA,
             options: HarnessOptions | None = None) -> Verdict:
    """Evaluate one candidate from scratch (a fresh reference process). There is no next attempt,
    so no sandbox is started ahead (``prestart`` off): nothing to wait for, nothing wasted.

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
    the playbook's), in a sandbox that runs trusted code only (a worker calls this at start-up, so no
    attempt pays for them). Returns whether they are in place; a failure only costs compile speed."""
    options = (options or HarnessOptions()).replace(prestart=False)
    problem = parse_problem(_WARMUP_PROBLEM, problem_id="kernelloop/warm-up")
    with Referee(problem, target, options) as referee:
        return referee.warm_headers(PCH_FLAG_SETS[Target(target)][:1] if prescribed_only else None)
