"""Admission: a problem is accepted only if it makes a meaningful test (docs/architecture.md, docs/problems.md).

Its output must depend on inputs and weights, vary across seeds, be deterministic (unless it
declares otherwise), and an all-zeros output must fail the tolerance. The checks run the
problem's code in a sandbox; this module only orchestrates. Stdlib only.
"""

from __future__ import annotations

import ast
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.channel import ChannelClosed, ChannelTimeout
from harness.options import HarnessOptions
from harness.problemsandbox import limit_message, problem_sandbox_spec
from harness.protocol import StartFailed
from harness.protocol.admission import (
    AdmissionCheck,
    AdmissionReply,
    AdmitRequest,
    Measured,
    MeasureReply,
    MeasureRequest,
)
from harness.sandbox import SandboxProcess
from harness.sandboxspec import SandboxSpec
from harness.seeds import derive_seed, new_secret, plan_trials
from problems.constants import Constant, literal_sizes
from problems.spec import Problem
from vocabulary.evaluation import Target
from vocabulary.wire import JsonObject, WireError

__all__ = ["SLOW_CPU_FORWARD_MS", "AdmissionCheck", "AdmissionReport", "admit", "measure_footprints", "suggestions_for"]

#: What an admission sandbox that answered nonsense is told it did (its code is the problem's).
_MALFORMED = "the problem's process sent a malformed reply"
#: A forward slower than this on the cpu target gets the suggestion to declare (smaller) CPU_SIZES:
#: every attempt runs the forward a few hundred times (trials, warm-up, the timing loops of the
#: kernel, eager PyTorch and torch.compile), so at this speed an attempt costs minutes.
SLOW_CPU_FORWARD_MS = 100.0
#: What a suggested CPU size aims at: a forward of about this long (a figure well above the clock's
#: and the launch's overheads, well under what makes an attempt slow).
_TARGET_CPU_FORWARD_MS = 10.0


@dataclass(frozen=True)
class AdmissionReport:
    problem_id: str
    target: str
    checks: tuple[AdmissionCheck, ...]
    message: str = ""
    forward_ms: float | None = None
    output_shapes: tuple[tuple[int, ...], ...] = ()
    #: What would make the problem better to run (admitted or not): `suggestions_for`.
    suggestions: tuple[str, ...] = ()

    @property
    def admitted(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks) and not self.message

    @property
    def reasons(self) -> list[str]:
        return [c.detail for c in self.checks if not c.passed] + ([self.message] if self.message else [])

    def to_dict(self) -> JsonObject:
        return {
            "problem_id": self.problem_id, "target": self.target, "admitted": self.admitted,
            "checks": [c.to_dict() for c in self.checks], "message": self.message,
            "forward_ms": self.forward_ms, "output_shapes": [list(s) for s in self.output_shapes],
            "suggestions": list(self.suggestions),
        }


def suggestions_for(problem: Problem, target: Target, forward_ms: float | None) -> tuple[str, ...]:
    """What to change in a problem that admission measured: a forward slower than
    `SLOW_CPU_FORWARD_MS` on the cpu target should declare (smaller) ``CPU_SIZES``."""
    if target is not Target.CPU or forward_ms is None or forward_ms <= SLOW_CPU_FORWARD_MS:
        return ()
    declared = ", ".join(f"{k}={v!r}" for k, v in problem.cpu_sizes.items())
    which = (f"its CPU_SIZES ({declared}) are still large: make them smaller" if declared
             else "declare CPU_SIZES, smaller values of its size constants for the cpu target")
    # An example on the first size constant, scaled as if the time were linear in it (a guess).
    sizes = {k: v for k, v in literal_sizes(ast.parse(problem.source)).items() if isinstance(v, int)}
    sizes.update({k: v for k, v in problem.cpu_sizes.items() if isinstance(v, int) and k in sizes})
    example = ""
    if sizes:
        name, value = next(iter(sizes.items()))
        example = (f", e.g. CPU_SIZES = {{{name!r}: {max(1, round(value * _TARGET_CPU_FORWARD_MS / forward_ms))}}} "
                   f"(from {value})").replace("'", '"')
    return (f"one forward takes {forward_ms:.0f} ms on the cpu, and every attempt runs it a few hundred times "
            f"(trials, warm-up, the timing of the kernel, eager PyTorch and torch.compile): {which}{example}, "
            f"so that a forward takes about {_TARGET_CPU_FORWARD_MS:.0f} ms (`kernelloop problems import` finds "
            "such sizes; docs/problems.md)",)


def _admission_spec(options: HarnessOptions, target: Target) -> SandboxSpec:
    workdir = options.runs_dir / f"admission-{secrets.token_hex(8)}"
    # A submitted problem is code from outside too: confined like the reference sandbox (no cache,
    # no other run, no service data, limits named when hit).
    return problem_sandbox_spec("admission", workdir, options, target, namespaces=("user", "mount", "net", "pid"))


def measure_footprints(problem: Problem, overrides: Sequence[Mapping[str, Constant]],
                       options: HarnessOptions | None = None) -> list[Measured]:
    """The problem's footprint (bytes of inputs, parameters and outputs of one trial, computed on
    the meta device: nothing is allocated) under each override set, in an admission
    sandbox: a `Measured` each, its footprint or why the meta device could not compute it.

    Raises:
        RuntimeError: the sandbox did not answer (the message holds its log's tail) or failed.
    """
    options = options or HarnessOptions()
    with SandboxProcess(_admission_spec(options, Target.CPU), sandbox=options.sandbox) as process:
        try:
            raw = process.request(MeasureRequest(problem=problem, overrides=tuple(overrides)),
                                  timeout=options.timeouts.reference_start_s)
        except (ChannelTimeout, ChannelClosed):
            raise RuntimeError(f"the problem's process {process.describe_exit()}:\n{process.log_tail(2000)}") from None
    try:
        reply = MeasureReply.from_reply(raw)
    except WireError as exc:
        raise RuntimeError(f"{_MALFORMED}: {exc}") from None
    if isinstance(reply, StartFailed):
        raise RuntimeError(f"{reply.message}:\n{reply.errors}".strip())
    return list(reply.footprints)


def admit(problem: Problem, target: Target | str, options: HarnessOptions | None = None) -> AdmissionReport:
    """Run the admission checks for one problem on one target.

    Returns:
        An `AdmissionReport`; ``admitted`` says whether the problem is accepted, ``reasons`` why not.
    """
    options = options or HarnessOptions()
    target = Target(target)
    secret = options.secret_seed if options.secret_seed is not None else new_secret()
    trials = plan_trials(secret, trials=2, input_variants=problem.input_variants,
                         extra_shapes=problem.trial_shapes(target.value))
    spec = _admission_spec(options, target)
    request = AdmitRequest(
        problem=problem, target=target, trials=tuple(trials), init_seed=derive_seed(secret, "init"),
        weights_seed=derive_seed(secret, "weights"), other_weights_seed=derive_seed(secret, "weights:other"),
        budget_bytes=options.cpu_budget_bytes,
    )
    with SandboxProcess(spec, sandbox=options.sandbox) as process:
        try:
            raw = process.request(request, timeout=options.timeouts.reference_start_s)
        except (ChannelTimeout, ChannelClosed) as exc:
            reason = "timed out" if isinstance(exc, ChannelTimeout) else process.describe_exit()
            log = process.log_tail(2000)
            process.kill()
            limit = limit_message(spec, process.exit_code(1.0), log)
            return AdmissionReport(problem.id, target.value, (), message=(f"{limit}: " if limit else "")
                                   + f"the problem's process {reason}:\n{log}")
    try:
        reply = AdmissionReply.from_reply(raw)
    except WireError as exc:
        return AdmissionReport(problem.id, target.value, (), message=f"{_MALFORMED}: {exc}")
    if isinstance(reply, StartFailed):
        limit = limit_message(spec, None, reply.errors)
        return AdmissionReport(problem.id, target.value, (), message=(f"{limit}: " if limit else "")
                               + f"{reply.message}:\n{reply.errors}".strip())
    return AdmissionReport(problem.id, target.value, reply.checks, forward_ms=reply.forward_ms,
                           output_shapes=reply.output_shapes,
                           suggestions=suggestions_for(problem, target, reply.forward_ms))
