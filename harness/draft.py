"""A verdict in the making: the frozen `Draft` and the pure steps that judge what a stage reported.

The candidate run (`harness.candidaterun`) talks to the stages; every decision it makes on what
came back is a function here, from a draft to a new draft (`dataclasses.replace`) or to the
`Outcome` that ends the evaluation. Nothing here does I/O: each step is tested on its own
(tests/harness/test_draft.py). Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from harness.builds import CompileResult
from harness.hardened import calls_made, hardened_bound
from harness.integrity import DECISIVE_FLAGS, FLAG_TEXT, PURE_ALLOWED_OPS, Flag
from harness.options import Depth, TimingOptions
from harness.protocol.candidate import TimeReply, TrialReply
from harness.protocol.reference import Compared
from harness.sandboxspec import SandboxReport
from harness.seeds import TrialSpec
from harness.verdict import Baselines, ErrorKind, ProfileRow, Stage, Status, Timing, Trial

__all__ = [
    "CLOCK_SLACK", "Draft", "Outcome", "TimingPlan", "decisive_outcome", "failed_trials", "hardened_pick",
    "kept_in_order", "needs_second_run", "torch_ops_detail", "with_extension_check", "with_flags", "with_timed_run",
    "with_trial",
]

#: Over this, the trusted clock says the candidate's reported samples cannot be right.
CLOCK_SLACK = 1.02


@dataclass(frozen=True)
class Outcome:
    """How an evaluation ends: the verdict's status, stage, message and whose fault it is."""

    status: Status
    stage: Stage
    message: str = ""
    error_kind: ErrorKind | None = None


@dataclass(frozen=True, kw_only=True)
class Draft:
    """What the stages found so far, for the verdict (`harness.assembly.assemble`)."""

    depth: Depth
    hints: tuple[str, ...] = ()
    compile: CompileResult | None = None
    baselines: Baselines | None = None
    #: What the candidate stage's sandbox achieved (None before it ran).
    sandbox: SandboxReport | None = None
    #: The extension modules the candidate stage loaded from its builds.
    extensions: tuple[str, ...] = ()
    trials: tuple[Trial, ...] = ()
    flags: tuple[str, ...] = ()
    #: The torch ops a pure-policy forward dispatched beyond allocation and views.
    torch_ops: tuple[str, ...] = ()
    timing: Timing | None = None
    profile: tuple[ProfileRow, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TimingPlan:
    """What the timing stage is asked: the timing ``request`` (hardened: the calls dictated),
    the input ``sets`` rotated, and whether the trusted clock bounds the result (``hardened``)."""

    request: TimingOptions
    sets: tuple[int, ...]
    hardened: bool


def with_flags(draft: Draft, *flags: str) -> Draft:
    """The draft with ``flags`` raised (appended as found)."""
    return replace(draft, flags=(*draft.flags, *(str(f) for f in flags)))


def _with_reported(draft: Draft, reported: tuple[str, ...]) -> Draft:
    """The flags a stage reported, each once, ignoring anything that is not a flag."""
    flags = list(draft.flags)
    flags.extend(f for f in reported if f in FLAG_TEXT and f not in flags)
    return replace(draft, flags=tuple(flags))


def with_trial(draft: Draft, spec: TrialSpec, reply: TrialReply, result: Compared, *, pure: bool) -> Draft:
    """One correctness trial judged: its flags, the pure policy's op check, its comparison."""
    draft = _with_reported(draft, reply.flags)
    if pure and reply.ops is not None:
        torch_ops = tuple(op for op in reply.ops if op not in PURE_ALLOWED_OPS)
        draft = replace(draft, torch_ops=torch_ops)
        if torch_ops:
            draft = with_flags(draft, Flag.TORCH_COMPUTE_IN_PURE_FORWARD)
    trial = Trial(seed_index=spec.index, kind=spec.kind, passed=result.passed, max_abs_err=result.max_abs_err,
                  mean_abs_err=result.mean_abs_err, mismatch_frac=result.mismatch_frac, message=result.message)
    return replace(draft, trials=(*draft.trials, trial))


def failed_trials(draft: Draft) -> Outcome | None:
    """A ``fail`` naming how many trials failed and the first of them, or None if all passed."""
    failed = [t for t in draft.trials if not t.passed]
    if not failed:
        return None
    worst = failed[0]
    return Outcome(Status.FAIL, Stage.CORRECTNESS, f"{len(failed)} of {len(draft.trials)} trials failed; "
                   f"trial {worst.seed_index} ({worst.kind}): {worst.message}")


def with_extension_check(draft: Draft, *, noop_passed: bool | None) -> Draft:
    """The policy's test that the extension does real work: none loaded, or the no-op
    substitution trial's output still correct (``noop_passed``; None: it did not run or raised)."""
    if not draft.extensions:
        return with_flags(draft, Flag.NO_CUSTOM_KERNEL)
    return with_flags(draft, Flag.EXTENSION_DOES_NO_WORK) if noop_passed else draft


def decisive_outcome(draft: Draft, stage: Stage, detail: str = "") -> Outcome | None:
    """A ``fail`` at ``stage`` naming every decisive flag raised, or None if there is none."""
    decisive = [f for f in draft.flags if f in DECISIVE_FLAGS]
    if not decisive:
        return None
    return Outcome(Status.FAIL, stage, "; ".join(FLAG_TEXT[f] for f in decisive) + detail)


def torch_ops_detail(draft: Draft) -> str:
    """The pure policy's offending ops, for the integrity message."""
    return f" (torch ops in forward: {', '.join(draft.torch_ops[:10])})" if draft.torch_ops else ""


def kept_in_order(plan: TimingPlan, reply: TimeReply, first_call: int) -> bool:
    """Whether the re-checked outputs are the ones the timing loop must keep: one per input set
    (the calls after the timed ones cover each), no call twice, none from before this run and,
    hardened, the last call the dictated one. Only then are their outputs worth comparing."""
    calls = [k.call for k in reply.kept]
    if {k.index for k in reply.kept} != set(plan.sets) or len(set(calls)) != len(calls) or min(calls) < first_call:
        return False
    return not plan.hardened or max(calls) == first_call + calls_made(plan.request, plan.sets) - 1


def with_timed_run(draft: Draft, reply: TimeReply, wall_s: float, *, outputs_match: bool) -> Draft:
    """One timing run judged: the flags it reported, our clock against its samples, and its
    re-checked outputs (``outputs_match``)."""
    draft = _with_reported(draft, reply.flags)
    samples = reply.timing.samples_ms
    if (not samples or not all(math.isfinite(x) and x > 0 for x in samples)
            or sum(samples) / 1e3 > wall_s * CLOCK_SLACK):
        draft = with_flags(draft, Flag.CLOCK_DISAGREES)
    return draft if outputs_match else with_flags(draft, Flag.TIMED_OUTPUT_MISMATCH)


def needs_second_run(draft: Draft, plan: TimingPlan, timing: Timing, wall_s: float, overhead_s: float) -> bool:
    """Hardened timing gets a second run (for an honest run hit by a burst of load on the host)
    only if the first looks out of bounds and nothing decisive was found."""
    if not plan.hardened or any(f in DECISIVE_FLAGS for f in draft.flags):
        return False
    return hardened_bound(timing, wall_s, overhead_s, plan.request, plan.sets)[0]


def hardened_pick(draft: Draft, plan: TimingPlan, runs: tuple[tuple[Timing, float], ...],
                  overhead_s: float) -> tuple[Draft, Timing, str]:
    """The hardened runs against the trusted clock (the loop's larger measured overhead): the
    first that fits, with its figures for the message; if none does, the last run and
    ``clock_disagrees``."""
    bounds = [(hardened_bound(t, w, overhead_s, plan.request, plan.sets), t) for t, w in runs]
    fitting = [(text, t) for (disagrees, text), t in bounds if not disagrees]
    if fitting:
        detail, timing = fitting[0]
        return draft, timing, detail
    return with_flags(draft, Flag.CLOCK_DISAGREES), runs[-1][0], bounds[-1][0][1]
