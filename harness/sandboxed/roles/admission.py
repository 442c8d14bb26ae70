"""Admission sandbox: does a problem make a meaningful test? Runs the problem's code, sandboxed."""

from __future__ import annotations

import time
import types

import torch

from harness.channel import Channel, SandboxMessage
from harness.options import default_tolerance
from harness.protocol import Op, StartFailed, op_of
from harness.protocol.admission import (
    AdmissionCheck,
    AdmissionReply,
    AdmitRequest,
    Measured,
    MeasureReply,
    MeasureRequest,
)
from harness.sandboxed import contract, footprint
from harness.sandboxed.compare import compare_outputs, flatten_output
from harness.sandboxed.roles.loading import brief_error, load_problem_module
from harness.seeds import TrialSpec
from problems.constants import resolve_overrides
from problems.spec import Problem


def _outputs(module: types.ModuleType, model: torch.nn.Module, trial: TrialSpec, device: torch.device,
             rng_seed: int = 0) -> list[torch.Tensor]:
    inputs = contract.make_inputs(module, trial, device)
    torch.manual_seed(rng_seed)  # a randomised forward must not look deterministic by reseeding
    with torch.no_grad():
        out = model(*inputs)
    flat = flatten_output(out)
    if flat is None:
        raise TypeError(f"Model.forward returned {type(out).__name__}, expected tensor(s)")
    return [t.detach().clone() for t in flat]


def _differs(a: list[torch.Tensor], b: list[torch.Tensor], problem: Problem) -> bool:
    result = compare_outputs(a, b, atol=problem.atol, rtol=problem.rtol, tolerance_for=default_tolerance)
    return not result.passed


def _footprint(module: types.ModuleType) -> Measured:
    try:
        return Measured(footprint=footprint.measure(module))
    except Exception as exc:  # noqa: BLE001 - the sizes are unknown; the caller says so
        return Measured(footprint=None, error=brief_error(exc))


def measure(request: MeasureRequest) -> MeasureReply:
    """Footprints on the meta device of the problem under each override set in turn (each
    resolved against the source, so derived constants follow); nothing is allocated."""
    problem = request.problem
    module = load_problem_module(problem, "meta")
    results = []
    for overrides in request.overrides:
        with contract.overridden(module, resolve_overrides(problem.source, dict(overrides))):
            results.append(_footprint(module))
    return MeasureReply(footprints=tuple(results))


def check(request: AdmitRequest) -> AdmissionReply:
    problem, target = request.problem, request.target.value
    device = torch.device("cuda" if target == "cuda" else "cpu")
    contract.tf32_off()
    module = load_problem_module(problem, target)
    trials = list(request.trials)
    checks: list[AdmissionCheck] = []
    if target == "cpu" and request.budget_bytes:
        reason = footprint.over_budget(module, [t.overrides for t in trials], request.budget_bytes)
        if reason:
            return AdmissionReply(checks=(AdmissionCheck("fits_budget", False, reason),))

    def build(weights_seed: int) -> torch.nn.Module:
        torch.manual_seed(request.init_seed)
        model: torch.nn.Module = module.Model(*module.get_init_inputs())
        contract.redraw_weights(model, weights_seed)
        return model.train(problem.mode.value == "train").to(device)

    def record(name: str, passed: bool, detail: str) -> None:
        checks.append(AdmissionCheck(name, passed, detail))

    model = build(request.weights_seed)
    outputs: list[list[torch.Tensor]] = []
    started = time.perf_counter()
    for trial in trials:
        outputs.append(_outputs(module, model, trial, device))
    if device.type == "cuda":
        torch.cuda.synchronize()
    forward_ms = 1e3 * (time.perf_counter() - started) / len(trials)
    finite = all(bool(torch.isfinite(t).all()) for out in outputs for t in out if t.is_floating_point())
    record("finite", finite, "outputs are finite" if finite else "the reference output holds NaN or inf")

    # The RNG rule (docs/problems.md): the harness seeds torch's RNG identically before the
    # reference's and the candidate's forward, so a forward that draws random numbers (dropout)
    # is a fair test if it declares RANDOM = True and is reproducible under the same seed.
    again = _outputs(module, model, trials[0], device, rng_seed=0)
    reseeded = _outputs(module, model, trials[0], device, rng_seed=1)
    reproducible = not _differs(again, outputs[0], problem)
    draws_random = _differs(reseeded, outputs[0], problem)
    if problem.nondeterministic:
        record("deterministic", True, "declared NONDETERMINISTIC: determinism not required")
    elif not reproducible:
        record("deterministic", False, "two runs with the same inputs and the same RNG seed differ: remove the "
               "source of nondeterminism or declare NONDETERMINISTIC = True")
    elif draws_random and not problem.random:
        record("deterministic", False, "the forward draws random numbers (its output changes with the RNG seed): "
               "declare RANDOM = True; the harness then seeds the RNG identically before the reference's and "
               "the candidate's forward")
    else:
        record("deterministic", True, "same inputs and RNG seed, same output" + (
            "; draws random numbers (RANDOM)" if draws_random else ""))

    depends_inputs = _differs(outputs[0], outputs[1], problem) if len(outputs) > 1 else False
    record("depends_on_inputs", depends_inputs,
           "output changes with the inputs" if depends_inputs else "two different inputs give the same output")

    other = build(request.other_weights_seed)
    weight_out = _outputs(module, other, trials[0], device)
    depends_weights = _differs(outputs[0], weight_out, problem) or not any(
        t.is_floating_point() for t in model.state_dict().values())
    record("depends_on_weights", depends_weights,
           "output changes with the weights" if depends_weights
           else "re-drawn weights give the same output: the parameters do not matter")

    zeros = [torch.zeros_like(t) for t in outputs[0]]
    zeros_fail = _differs(outputs[0], zeros, problem)
    record("zeros_fail", zeros_fail, "an all-zeros output fails the tolerance" if zeros_fail
           else "an all-zeros output passes the tolerance: the test would accept a kernel that writes nothing")
    return AdmissionReply(checks=tuple(checks), forward_ms=forward_ms,
                          output_shapes=tuple(tuple(t.shape) for t in outputs[0]),
                          output_dtypes=tuple(str(t.dtype).removeprefix("torch.") for t in outputs[0]))


def serve(channel: Channel) -> None:
    raw = channel.recv()  # the referee's request: a malformed one is our bug, not the problem's
    request = MeasureRequest.from_dict(raw) if op_of(raw) is Op.MEASURE else AdmitRequest.from_dict(raw)
    reply: SandboxMessage
    try:
        reply = measure(request) if isinstance(request, MeasureRequest) else check(request)
    except BaseException as exc:  # noqa: BLE001 - a problem that crashes is refused with the reason
        reply = StartFailed(message="the problem failed to run", errors=brief_error(exc))
    channel.send(reply)
