"""The trusted reference process: expected outputs, baselines, roofline, and the comparer.

It never imports candidate code. It may live across a job's attempts: expected outputs are
computed once and kept here, in memory, where no candidate can read them (the process is
non-dumpable, so a candidate under the same uid cannot read its memory through /proc).
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from harness.channel import Channel, SandboxMessage, parse_message
from harness.options import default_tolerance
from harness.protocol import Op, OpFailed, StartFailed, op_of
from harness.protocol.meter import CallInputs, MeterEnd, Metering
from harness.protocol.reference import (
    Compared,
    CompareItem,
    CompareReply,
    CompareRequest,
    DeviceMeasured,
    MeterRequest,
    ReferenceEnvironment,
    ReferenceInfo,
    ReferenceStart,
    Timed,
)
from harness.sandboxed import contract, footprint
from harness.sandboxed.compare import compare_outputs, flatten_output
from harness.sandboxed.meter import Meter, call_inputs
from harness.sandboxed.roles.loading import brief_error, load_problem_module
from harness.sandboxed.roofline import count_flops, device_specs, host_loaded, min_bytes, sol_ms
from harness.sandboxed.transfer import OutputRejected, import_output
from vocabulary.devices import DeviceSpecs


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class ProblemTooLarge(ValueError):
    """The problem's trials need more memory than the cpu target's budget (the figure says)."""


class Reference:
    def __init__(self, request: ReferenceStart, specs: DeviceSpecs) -> None:
        self.problem = request.problem
        self.target = request.target.value
        self.device = torch.device("cuda" if self.target == "cuda" else "cpu")
        self.trials = list(request.trials)
        contract.tf32_off()
        self.meter = Meter.load(request.meter_path, self.device)
        self._compiled: Callable[..., Any] | None = None
        self.module = load_problem_module(self.problem, self.target)
        if self.target == "cpu" and request.budget_bytes:
            too_large = footprint.over_budget(self.module, [t.overrides for t in self.trials], request.budget_bytes)
            if too_large:
                raise ProblemTooLarge(too_large)
        torch.manual_seed(request.init_seed)
        self.model = self.module.Model(*self.module.get_init_inputs())
        contract.redraw_weights(self.model, request.weights_seed)
        self.model.train(self.problem.mode.value == "train").to(self.device)
        self.expected: list[list[torch.Tensor]] = []
        for trial in self.trials:
            inputs = contract.make_inputs(self.module, trial, self.device)
            contract.seed_forward(trial.seed)
            with torch.no_grad():
                out = self.model(*inputs)
            flat = flatten_output(out)
            if flat is None:
                raise TypeError(f"the reference Model returned {type(out).__name__}, not tensor(s)")
            self.expected.append([t.detach().clone() for t in flat])
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        first_inputs = contract.make_inputs(self.module, self.trials[0], self.device)
        self.flops = count_flops(self.model, first_inputs)
        self.min_bytes = min_bytes(first_inputs, self.expected[0], self.model)
        self.specs = specs
        self.out_dtype = self.expected[0][0].dtype
        self.sol_ms = sol_ms(self.flops, self.min_bytes, self.specs, self.out_dtype)

    def start_reply(self) -> ReferenceInfo:
        return ReferenceInfo(
            specs=self.specs, flops=self.flops, min_bytes=self.min_bytes, sol_ms=self.sol_ms,
            output_dtype=str(self.out_dtype).removeprefix("torch."),
            environment=ReferenceEnvironment(
                torch=torch.__version__, cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                python=platform.python_version(), device=self.specs.name, driver=self.specs.driver,
                # CPU timings depend on it (a baseline cached with 8 threads is no baseline for 1).
                cpu_threads=torch.get_num_threads()),
        )

    def meter_run(self, channel: Channel, request: MeterRequest) -> MeterEnd:
        """The model (eager, or under ``torch.compile``: compiled on its first call) in the metered
        loop, as the candidate is timed: the baselines, and the loop's own cost (`Calibration`)."""
        sets = [contract.make_inputs(self.module, self.trials[i], self.device) for i in request.sets]
        fn: Callable[..., Any] = self.model
        if request.timed is Timed.COMPILED:
            if self._compiled is None:
                self._compiled = torch.compile(self.model)
            fn = self._compiled
        channel.send(Metering())
        calls = self.meter.run(channel, fn, sets, flush=request.flush)
        return MeterEnd(calls=calls)

    def _expected_for_call(self, index: int, call: CallInputs) -> list[torch.Tensor]:
        """The output of an audited timed call: the trial's inputs as that call saw them."""
        inputs = call_inputs(contract.make_inputs(self.module, self.trials[index], self.device), call.input_seed,
                             self.device)
        torch.manual_seed(call.forward_seed)
        with torch.no_grad():
            out = self.model(*inputs)
        flat = flatten_output(out)
        if flat is None:
            raise TypeError(f"the reference Model returned {type(out).__name__}, not tensor(s)")
        return flat

    def compare(self, item: CompareItem, directory: Path, fds: tuple[int, ...], atol: float | None,
                rtol: float | None) -> Compared:
        index, call = item.index, item.call
        expected = self.expected[index] if call is None else self._expected_for_call(index, call)
        try:
            actual = import_output(item.output, directory, expected_bytes=_nbytes(expected), device=self.device,
                                   fds=fds)
        except OutputRejected as exc:
            return Compared(passed=False, max_abs_err=None, mean_abs_err=None, mismatch_frac=1.0, message=str(exc))
        result = compare_outputs(expected, actual, atol=atol, rtol=rtol, tolerance_for=default_tolerance)
        return Compared(passed=result.passed, max_abs_err=result.max_abs_err, mean_abs_err=result.mean_abs_err,
                        mismatch_frac=result.mismatch_frac, message=result.message)


def _make_non_dumpable() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(4, ctypes.c_ulong(0), 0, 0, 0)


def serve(channel: Channel) -> None:
    _make_non_dumpable()
    request = ReferenceStart.from_dict(channel.recv())  # the referee's: a malformed one is our bug
    specs = request.specs
    if specs is None:  # measured and sent before the problem's code is loaded: it cannot touch them
        specs = device_specs(torch.device("cuda" if request.target.value == "cuda" else "cpu"))
        channel.send(DeviceMeasured(specs=specs, host_loaded=host_loaded()))
    try:
        ref = Reference(request, specs)
    except ProblemTooLarge as exc:
        channel.send(StartFailed(message=f"the problem is too large for the cpu target: {exc}"))
        return
    except BaseException as exc:  # noqa: BLE001 - a broken problem is reported, not raised
        channel.send(StartFailed(message="the reference problem failed to run", errors=brief_error(exc)))
        return
    channel.send(ref.start_reply())
    while True:
        frame = channel.recv_frame()
        message = parse_message(frame.payload)
        op = op_of(message)
        if op is Op.EXIT:
            return
        reply: SandboxMessage
        try:
            if op is Op.METER:
                reply = ref.meter_run(channel, MeterRequest.from_dict(message))
            elif op is Op.COMPARE:
                compare = CompareRequest.from_dict(message)
                reply = CompareReply(results=tuple(
                    ref.compare(item, compare.directory, frame.fds, compare.atol, compare.rtol)
                    for item in compare.items))
            else:
                reply = OpFailed(error=f"unknown op {message.get('op')!r}")
        except Exception as exc:  # noqa: BLE001 - the problem's forward raised: reported, the process lives on
            reply = OpFailed(error=brief_error(exc))
        finally:
            frame.close_fds()
        channel.send(reply)
