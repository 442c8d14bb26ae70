"""A verdict in the making: the frozen `Draft` and the pure steps that judge what a sandbox reported.

The candidate run (`harness.candidaterun`) talks to the sandboxes; every decision it makes on what
came back is a function here, from a draft to a new draft (`dataclasses.replace`) or to the
`Outcome` that ends the evaluation. Nothing here does I/O: each step is tested on its own
(tests/harness/test_draft.py). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.meter.drive import MeteredRun
from harness.meter.frames import DoneStatus
from harness.protocol.candidate import Loaded, TrialReply
from harness.protocol.meter import MeterEnd
from harness.protocol.reference import Compared
from harness.sandboxspec import SandboxReport
from harness.seeds import TrialSpec
from vocabulary.builds import CompileResult
from vocabulary.causes import KernelError
from vocabulary.evaluation import Depth
from vocabulary.flags import DECISIVE_FLAGS, FLAG_TEXT, Flag
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import ErrorKind, ProfileRow, Stage, Status, Trial

__all__ = [
    "Draft", "Outcome", "decisive_outcome", "failed_trials", "metered_failure", "torch_ops_detail", "weights_note",
    "with_extension_check", "with_flags", "with_kernel_errors", "with_loaded", "with_metered_run", "with_trial",
]

#: aten ops a "pure" forward may dispatch: allocation, views and metadata — no compute.
PURE_ALLOWED_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "view", "_unsafe_view", "reshape", "as_strided", "permute", "transpose", "t",
    "expand", "squeeze", "unsqueeze", "select", "slice", "narrow", "detach", "alias", "lift_fresh",
    "split", "split_with_sizes", "chunk", "unbind", "sym_size", "sym_stride", "sym_numel",
    "is_contiguous", "_local_scalar_dense", "view_as", "expand_as", "flatten", "unflatten",
})


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
    #: What the candidate's sandbox achieved (None before it ran).
    sandbox: SandboxReport | None = None
    #: The extension modules the candidate sandbox loaded from its builds.
    extensions: tuple[str, ...] = ()
    trials: tuple[Trial, ...] = ()
    flags: tuple[Flag, ...] = ()
    #: The torch ops a pure-policy forward dispatched beyond allocation and views.
    torch_ops: tuple[str, ...] = ()
    timing: Timing | None = None
    profile: tuple[ProfileRow, ...] = ()
    #: What the decisive flags found, beyond their text (the names a tamper check found).
    details: tuple[str, ...] = ()
    #: Extension functions that raised while forward went on, by trial (`vocabulary.causes`).
    kernel_errors: tuple[KernelError, ...] = ()
    #: How the candidate was taken that is no failure (`Verdict.notes`).
    notes: tuple[str, ...] = ()


def with_flags(draft: Draft, *flags: Flag) -> Draft:
    """The draft with ``flags`` raised (appended as found)."""
    return replace(draft, flags=(*draft.flags, *flags))


def _with_reported(draft: Draft, reported: tuple[str, ...]) -> Draft:
    """The flags a sandbox reported, each once, ignoring anything that is not a flag."""
    flags = list(draft.flags)
    flags.extend(Flag(f) for f in dict.fromkeys(reported) if f in FLAG_TEXT and f not in flags)
    return replace(draft, flags=tuple(flags))


def _with_tampered(draft: Draft, names: tuple[str, ...]) -> Draft:
    if not names:
        return draft
    if Flag.HARNESS_TAMPERED not in draft.flags:
        draft = with_flags(draft, Flag.HARNESS_TAMPERED)
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    detail = f"changed: {shown}"
    return draft if detail in draft.details else replace(draft, details=(*draft.details, detail))


def with_trial(draft: Draft, spec: TrialSpec, reply: TrialReply, result: Compared, *, pure: bool) -> Draft:
    """One correctness trial judged: its flags, the pure policy's op check, its comparison."""
    draft = _with_tampered(_with_reported(draft, reply.flags), reply.tampered)
    if pure and reply.ops is not None:
        torch_ops = tuple(op for op in reply.ops if op not in PURE_ALLOWED_OPS)
        draft = replace(draft, torch_ops=torch_ops)
        if torch_ops:
            draft = with_flags(draft, Flag.TORCH_COMPUTE_IN_PURE_FORWARD)
    trial = Trial(seed_index=spec.index, kind=spec.kind, passed=result.passed, max_abs_err=result.max_abs_err,
                  mean_abs_err=result.mean_abs_err, mismatch_frac=result.mismatch_frac, message=result.message)
    return with_kernel_errors(replace(draft, trials=(*draft.trials, trial)), reply.kernel_errors, trial=spec.index)


def with_kernel_errors(draft: Draft, errors: tuple[KernelError, ...], *, trial: int | None,
                       noop: bool = False) -> Draft:
    """What the extension functions raised in one request (``trial``: its index; None: the load)."""
    if not errors:
        return draft
    return replace(draft, kernel_errors=(*draft.kernel_errors, *(replace(e, trial=trial, noop=noop) for e in errors)))


#: Renamed weights a note lists by name (the rest are counted).
_RENAMED_LISTED = 8


def weights_note(renamed: tuple[tuple[str, str], ...]) -> str:
    """The verdict's note on weights loaded by registration order rather than by name."""
    pairs = ", ".join(f"{a} -> {b}" for a, b in renamed[:_RENAMED_LISTED])
    more = f" and {len(renamed) - _RENAMED_LISTED} more" if len(renamed) > _RENAMED_LISTED else ""
    return (f"ModelNew names its parameters and buffers differently from Model, so the reference weights were "
            f"loaded by registration order (KernelBench builds both models from the same seed, so names never "
            f"mattered): {pairs}{more}")


def with_loaded(draft: Draft, loaded: Loaded) -> Draft:
    """The load judged: the extensions the sandbox imported, how the weights went in, and what its
    extension functions raised while it loaded."""
    draft = replace(draft, extensions=loaded.extensions,
                    notes=(*draft.notes, weights_note(loaded.renamed)) if loaded.renamed else draft.notes)
    return with_kernel_errors(draft, loaded.kernel_errors, trial=None)


def failed_trials(draft: Draft, planned: int | None = None) -> Outcome | None:
    """A ``fail`` naming how many trials failed and the first of them, or None if all passed.
    ``planned``: the trials there were to run (the run stops at the first failure)."""
    failed = [t for t in draft.trials if not t.passed]
    if not failed:
        return None
    worst = failed[0]
    skipped = (planned or 0) - len(draft.trials)
    rest = f" ({skipped} later trial{'s' if skipped != 1 else ''} not run)" if skipped > 0 else ""
    return Outcome(Status.FAIL, Stage.CORRECTNESS, f"{len(failed)} of {len(draft.trials)} trials failed{rest}; "
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
    found = "".join(f" ({d})" for d in draft.details)
    return Outcome(Status.FAIL, stage, "; ".join(FLAG_TEXT[f] for f in decisive) + found + detail)


def torch_ops_detail(draft: Draft) -> str:
    """The pure policy's offending ops, for the integrity message."""
    return f" (torch ops in forward: {', '.join(draft.torch_ops[:10])})" if draft.torch_ops else ""


def metered_failure(run: MeteredRun) -> Outcome | None:
    """How a metered run that the candidate's code ended is told: forward raised (an error), or
    an output, a switch or a protocol the loop refuses (a failure); None if the run ended well."""
    if run.protocol_error is not None:
        return None  # a flag (`with_metered_run`): the integrity message names it
    failure = run.failure
    if failure is None:
        return None
    if failure.status is DoneStatus.FORWARD_RAISED:
        return Outcome(Status.ERROR, Stage.TIMING, f"{failure.message} (while timed)", ErrorKind.CANDIDATE)
    if failure.status in (DoneStatus.BAD_OUTPUT, DoneStatus.TF32):
        return None  # flags
    return Outcome(Status.ERROR, Stage.TIMING, f"the timing loop failed: {failure.message}", ErrorKind.CANDIDATE)


def with_metered_run(draft: Draft, run: MeteredRun, end: MeterEnd | None, *, audits_match: bool) -> Draft:
    """One metered run judged: what the loop refused (a timed output that is not a plain tensor,
    TF32 switched on), a broken protocol, the sandbox's in-process flags and tamper check, and
    whether the audited outputs matched the reference's."""
    if run.protocol_error is not None:
        draft = replace(with_flags(draft, Flag.TIMING_PROTOCOL_BROKEN), details=(*draft.details, run.protocol_error))
    if run.failure is not None and run.failure.status is DoneStatus.BAD_OUTPUT:
        draft = replace(with_flags(draft, Flag.TIMED_OUTPUT_NOT_PLAIN), details=(*draft.details, run.failure.message))
    if run.failure is not None and run.failure.status is DoneStatus.TF32 and Flag.TF32_ENABLED not in draft.flags:
        draft = with_flags(draft, Flag.TF32_ENABLED)
    if end is not None:
        draft = _with_tampered(_with_reported(draft, end.flags), end.tampered)
    return draft if audits_match else with_flags(draft, Flag.TIMED_OUTPUT_MISMATCH)
