"""The trusted reference process: expected outputs, baselines, roofline, and the comparer.

It never imports candidate code. It may live across a job's attempts: expected outputs are
computed once and kept here, in memory, where no candidate can read them (the process is
non-dumpable, so a candidate under the same uid cannot read its memory through /proc).
"""

from __future__ import annotations

import ctypes
import platform
import tempfile
from pathlib import Path

import torch

from harness import contract, footprint
from harness.channel import Channel, StageMessage
from harness.compare import compare_outputs, flatten_output
from harness.options import TimingOptions, default_tolerance
from harness.protocol import Op, OpFailed, StartFailed, op_of
from harness.protocol.reference import (
    BaselinesRequest,
    Compared,
    CompareItem,
    CompareReply,
    CompareRequest,
    LoopReply,
    LoopRequest,
    ReferenceEnvironment,
    ReferenceInfo,
    ReferenceStart,
)
from harness.roles.loading import brief_error, load_problem_module
from harness.roofline import count_flops, device_specs, min_bytes, sol_ms
from harness.timing import scaled_inputs, time_callable
from harness.transfer import OutputRejected, export_output, import_output
from harness.verdict import Baselines


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class ProblemTooLarge(ValueError):
    """The problem's trials need more memory than the cpu target's budget (the figure says)."""


class Reference:
    def __init__(self, request: ReferenceStart) -> None:
        self.problem = request.problem
        self.target = request.target.value
        self.device = torch.device("cuda" if self.target == "cuda" else "cpu")
        self.trials = list(request.trials)
        contract.tf32_off()
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
        self.specs = device_specs(self.device)
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

    def baselines(self, options: TimingOptions, compile_baseline: bool) -> Baselines:
        sets = [contract.make_inputs(self.module, t, self.device)
                for t in self.trials[: max(1, options.input_sets)] if t.kind == "random"]
        # The faster of two runs: interference from other work on the host only ever slows a run
        # down, and an inflated baseline would quarantine honest candidates as "suspicious".
        runs = [time_callable(self.model, sets, device=self.device, options=options).timing for _ in range(2)]
        eager = min(runs, key=lambda t: t.median_ms)
        if not compile_baseline:
            return Baselines(eager=eager, compiled=None, notes=("torch.compile baseline switched off",))
        try:
            compiled = torch.compile(self.model)
            timed = time_callable(compiled, sets, device=self.device, options=options).timing
        except Exception as exc:  # noqa: BLE001 - a failed torch.compile is a note, not a crash
            return Baselines(eager=eager, compiled=None,
                             notes=(f"torch.compile failed: {type(exc).__name__}: {str(exc)[:300]}",))
        return Baselines(eager=eager, compiled=timed)

    def loop(self, options: TimingOptions, set_indices: tuple[int, ...], transport: str) -> LoopReply:
        """The candidate's timing request, done with the reference model: the trusted side times
        the request with its own clock and takes this process's samples off to learn what the
        loop itself costs (flushes, input scaling, syncs, re-check copies, exports) on this device."""
        sets = [contract.make_inputs(self.module, self.trials[i], self.device) for i in set_indices]
        run = time_callable(self.model, sets, device=self.device, options=options, keep_outputs=True,
                            seed_calls=self.problem.random)
        with tempfile.TemporaryDirectory() as scratch:
            for call, _, out in run.kept:
                export_output(out, Path(scratch), f"timed-{call}", transport=transport)
        return LoopReply(timing=run.timing, kept=len(run.kept))

    def _expected_for_call(self, index: int, call: int) -> list[torch.Tensor]:
        """The output of a re-checked timed call: the trial's inputs as that call saw them."""
        inputs = scaled_inputs(contract.make_inputs(self.module, self.trials[index], self.device), call)
        contract.seed_forward(self.trials[index].seed, call)
        with torch.no_grad():
            out = self.model(*inputs)
        flat = flatten_output(out)
        if flat is None:
            raise TypeError(f"the reference Model returned {type(out).__name__}, not tensor(s)")
        return flat

    def compare(self, item: CompareItem, directory: Path, atol: float | None, rtol: float | None) -> Compared:
        index, call = item.index, item.call
        expected = self.expected[index] if call is None else self._expected_for_call(index, call)
        try:
            actual = import_output(item.output, directory, expected_bytes=_nbytes(expected), device=self.device)
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
    try:
        ref = Reference(request)
    except ProblemTooLarge as exc:
        channel.send(StartFailed(message=f"the problem is too large for the cpu target: {exc}"))
        return
    except BaseException as exc:  # noqa: BLE001 - a broken problem is reported, not raised
        channel.send(StartFailed(message="the reference problem failed to run", errors=brief_error(exc)))
        return
    channel.send(ref.start_reply())
    while True:
        message = channel.recv()
        op = op_of(message)
        if op is Op.EXIT:
            return
        reply: StageMessage
        try:
            if op is Op.BASELINES:
                asked = BaselinesRequest.from_dict(message)
                reply = ref.baselines(asked.timing, asked.compile_baseline)
            elif op is Op.LOOP:
                loop = LoopRequest.from_dict(message)
                reply = ref.loop(loop.timing, loop.sets, loop.transport)
            elif op is Op.COMPARE:
                compare = CompareRequest.from_dict(message)
                reply = CompareReply(results=tuple(ref.compare(item, compare.directory, compare.atol, compare.rtol)
                                                   for item in compare.items))
            else:
                reply = OpFailed(error=f"unknown op {message.get('op')!r}")
        except Exception as exc:  # noqa: BLE001 - the problem's forward raised: reported, the process lives on
            reply = OpFailed(error=brief_error(exc))
        channel.send(reply)
