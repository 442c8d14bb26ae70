"""From a finished draft to the `Verdict`: its provenance, its figures, and the quarantine.

`assemble` is the one place a verdict is built: a `Draft` (what the stages found), the `Outcome`
(how the evaluation ended) and the `VerdictFacts` of the Referee (problem, target, options, the
reference's device and environment). `quarantine` marks a pass faster than we believe possible
as ``suspicious``. Pure functions over frozen values; standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.draft import Draft, Outcome
from harness.protocol.reference import ReferenceInfo
from vocabulary.causes import cause_log, led_by_cause
from vocabulary.evaluation import Target
from vocabulary.flags import FLAG_TEXT, Flag
from vocabulary.provenance import HARNESS_VERSION, Provenance, Tolerance
from vocabulary.verdict import Status, Verdict

__all__ = ["ROOFLINE_SLACK", "UNTRUSTED_ROOFLINE_NOTE", "VerdictFacts", "assemble", "quarantine"]

#: A median under this fraction of ``sol_ms`` is "faster than the roofline". The memory floor uses
#: a *measured* copy's bandwidth, which a read-heavy kernel beats (on the H200 the copy moves
#: ~4.3 TB/s, the datasheet says 4.8: a legit reduction timed at 100.4 % of that floor), so only
#: clearly impossible times are quarantined, and a re-timed legit kernel at the roofline is believed.
ROOFLINE_SLACK = 0.8
#: A time under a roofline whose peak rates were measured only on a loaded host.
UNTRUSTED_ROOFLINE_NOTE = ("timed under the roofline of peak rates this machine measured only while loaded "
                           "(other work lowers them): not quarantined for it")


@dataclass(frozen=True, kw_only=True)
class VerdictFacts:
    """What every verdict of one Referee records besides what its stages found."""

    target: Target
    problem_sha256: str
    mode: str
    policy: str
    atol: float | None
    rtol: float | None
    trials: int
    #: The job secret's identity (`harness.seeds.secret_identity`).
    seeds: str
    #: A re-judging (`harness.HarnessOptions.rejudge`).
    rejudge: bool
    #: How CUDA outputs reach the comparer (``file`` on cpu).
    transport: str
    #: The reference's device and environment, once it started.
    reference: ReferenceInfo | None
    #: Where the referee runs: its interpreter's version, host name and pid.
    python: str
    host: str
    pid: int
    #: Bytes of a sandbox's log a verdict keeps.
    output_limit: int


def _provenance(facts: VerdictFacts, draft: Draft) -> Provenance:
    env = facts.reference.environment if facts.reference is not None else None
    return Provenance(
        target=facts.target.value,
        device=env.device if env else None,
        driver=env.driver if env else None,
        torch=env.torch if env else None,
        cuda=env.cuda if env else None,
        cudnn=env.cudnn if env else None,
        python=(env.python if env else None) or facts.python,
        harness=HARNESS_VERSION,
        problem_sha256=facts.problem_sha256,
        mode=facts.mode,
        policy=facts.policy,
        tolerance=Tolerance(atol=facts.atol, rtol=facts.rtol),
        trials=facts.trials,
        seeds=facts.seeds,
        compile_mode="default",
        timing_mode="metered, re-judged" if facts.rejudge else "metered",
        sandbox=draft.sandbox.namespaces if draft.sandbox is not None else None,
        transport=facts.transport,
        host=facts.host,
        pid=facts.pid,
    )


def _log(draft: Draft, log: str, limit: int) -> str:
    """The true cause's errors (`vocabulary.causes.cause_log`) first, then the tail of ``log``, within
    ``limit`` characters."""
    lead = cause_log(draft.compile, draft.kernel_errors)[:limit]
    room = limit - len(lead) - 2 if lead else limit
    tail = log[-room:] if log and room > 0 else ""
    return "\n\n".join(part for part in (lead, tail) if part)


def _host_loaded(draft: Draft) -> bool:
    """Whether the candidate's timing or a baseline it is compared with was taken on a loaded host."""
    baselines = draft.baselines
    timings = (draft.timing, *((baselines.eager, baselines.torch_compile) if baselines is not None else ()))
    return any(t is not None and t.host_loaded for t in timings)


def assemble(facts: VerdictFacts, draft: Draft, outcome: Outcome, *, log: str = "") -> Verdict:
    """The verdict of ``draft`` ended by ``outcome``; ``log``: the failed sandbox's, trimmed to
    the last ``facts.output_limit`` bytes. A failure the candidate hid (a build it caught, a kernel
    that raised while forward went on) leads the message and the log, whatever the outcome. Figures
    timed on a loaded host carry `Flag.HOST_LOADED` (a notice: it decides nothing)."""
    info = facts.reference
    flags = draft.flags
    if draft.timing is not None and _host_loaded(draft) and Flag.HOST_LOADED not in flags:
        flags = (*flags, Flag.HOST_LOADED)
    return Verdict(
        status=outcome.status, stage=outcome.stage, error_kind=outcome.error_kind,
        message=led_by_cause(outcome.message, draft.compile, draft.kernel_errors),
        compile=draft.compile, trials=draft.trials, timing=draft.timing, baselines=draft.baselines,
        sol_ms=info.sol_ms if info else None, flops=info.flops if info else None,
        min_bytes=info.min_bytes if info else None, flags=flags, hints=draft.hints,
        log=_log(draft, log, facts.output_limit), provenance=_provenance(facts, draft), depth=draft.depth,
        profile=draft.profile, kernel_errors=draft.kernel_errors, notes=draft.notes,
    )


def quarantine(verdict: Verdict, suspicious_speedup: float, *, roofline_trusted: bool = True) -> Verdict:
    """A pass faster than we believe possible (over ``suspicious_speedup`` times eager, or under
    `ROOFLINE_SLACK` of the roofline's time) becomes ``suspicious``: it waits for a re-time in a
    fresh process. Under a roofline that is not ``roofline_trusted`` (peak rates measured only on a
    loaded host) a pass stays a pass, with a note."""
    reasons = []
    speedup = verdict.speedup_vs_eager
    if speedup is not None and speedup > suspicious_speedup:
        reasons.append(Flag.SPEEDUP_OVER_LIMIT.value)
    if verdict.sol_ms and verdict.timing and verdict.timing.median_ms < ROOFLINE_SLACK * verdict.sol_ms:
        if roofline_trusted:
            reasons.append(Flag.FASTER_THAN_ROOFLINE.value)
        else:
            verdict = verdict.with_changes(notes=(*verdict.notes, UNTRUSTED_ROOFLINE_NOTE))
    if not reasons:
        return verdict
    text = "; ".join(FLAG_TEXT[r] for r in reasons)
    message = led_by_cause(f"quarantined: {text}; re-time in a fresh process before trusting it", verdict.compile,
                           verdict.kernel_errors)
    return verdict.with_changes(status=Status.SUSPICIOUS, flags=(*verdict.flags, *reasons), message=message)
