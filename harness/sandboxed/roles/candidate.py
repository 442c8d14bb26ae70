"""The untrusted candidate process: one per attempt, fresh each time.

It may start before its attempt (the referee prestarts it): torch imported, TF32 off, on a GPU the
context and vendor handles made, then "ready" and a wait. Its request brings derived seeds (never
the job's secret, never expected outputs); it loads and binds the metered loop (`harness.meter`)
before any of the problem's or the candidate's code runs, loads the built extensions from the
read-only copies of its own builds in its run directory, builds ``ModelNew`` with the reference
weights, and on request runs trials and the no-op substitution trial (outputs written into its
private directory for the comparer) or hands the model to the metered loop, which the trusted side
drives call by call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from harness.buildcache import BuildCache
from harness.buildcache.records import BuildAnswer
from harness.channel import Channel, SandboxMessage
from harness.protocol import Op, OpFailed, Ready, StartFailed, op_of
from harness.protocol.build import Delegation
from harness.protocol.candidate import (
    CandidateLoad,
    Loaded,
    ProfileReply,
    TimeRequest,
    TrialReply,
    TrialRequest,
)
from harness.protocol.meter import MeterEnd, Metering
from harness.sandboxed import contract
from harness.sandboxed.meter import Meter
from harness.sandboxed.roles.loading import brief_error, load_candidate_module, load_problem_module
from harness.sandboxed.transfer import export_output
from vocabulary.builds import BuildPhase
from vocabulary.causes import MAX_KERNEL_ERROR_CHARS, KernelError
from vocabulary.flags import Flag
from vocabulary.verdict import ProfileRow


class NoopSwitch:
    """Wraps every function of the candidate's extensions, as each module is handed to it; when on,
    their effects become noise. It sees every call: what one raises is recorded, then re-raised.

    "No-op" means: the real function runs (so shapes are right), then every tensor it returned
    and every tensor argument it changed is overwritten with random values. If the forward's
    output still matches the reference, the extension did no real work. Modules are wrapped as
    ``load_inline`` returns them (`BuildCache`'s ``on_module``), so a function the candidate binds
    at import (``fn = load_inline(...).fn``) is the wrapper too, and so is a lazily built one.
    """

    def __init__(self) -> None:
        self.active = False
        #: What extension functions raised since the last `take_raised` (the candidate may have
        #: caught it and fallen back: the verdict names it first).
        self.raised: list[KernelError] = []
        #: Name each call in the torch profiler: on while `Candidate.profile` runs on the CPU, whose
        #: profiler records torch ops only, so the extension's own C++ would be missing from it.
        self.label_calls = False

    def wrap_module(self, module: Any) -> None:
        for name in dir(module):
            if name.startswith("_"):
                continue
            fn = getattr(module, name)
            if callable(fn) and not isinstance(fn, type) and not getattr(fn, "_kl_wrapped", False):
                setattr(module, name, self._wrap(fn, f"{getattr(module, '__name__', '?')}.{name}"))

    def take_raised(self) -> tuple[KernelError, ...]:
        raised, self.raised = tuple(self.raised), []
        return raised

    def _wrap(self, fn: Any, qualname: str) -> Any:
        switch = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if switch.label_calls:
                with _record_function(qualname):
                    return run(*args, **kwargs)
            return run(*args, **kwargs)

        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                if not switch.active:
                    return fn(*args, **kwargs)
                tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
                before = [t.clone() for t in tensors]
                result = fn(*args, **kwargs)
            except Exception as exc:
                if len(switch.raised) < _MAX_RAISED:
                    switch.raised.append(KernelError(function=qualname, error=f"{type(exc).__name__}: {exc}"[
                        :MAX_KERNEL_ERROR_CHARS]))
                raise
            for t, old in zip(tensors, before, strict=True):
                if t.is_floating_point() and not torch.equal(t, old):
                    t.copy_(torch.randn_like(t))
            return _poison(result)

        wrapper.__name__ = getattr(fn, "__name__", "wrapped")
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        wrapper._kl_wrapped = True  # type: ignore[attr-defined]
        return wrapper


def _poison(result: Any) -> Any:
    if isinstance(result, torch.Tensor):
        return torch.randn_like(result) if result.is_floating_point() else torch.zeros_like(result)
    if isinstance(result, (tuple, list)):
        return type(result)(_poison(r) for r in result)
    return result


#: Run-time errors of extension functions kept per trial (a forward may call one in a loop).
_MAX_RAISED = 8
# Bound before candidate code runs: a candidate patching these does not blind the checks.
_sleep = time.sleep
_active_count = threading.active_count
_record_function = torch.profiler.record_function
#: How long a trial's output is left alone before it is compared with its copy taken when
#: forward returned: work still writing it (a thread, another stream) shows up as a change.
_SETTLE_S = 0.01


def _clone_output(out: Any) -> Any:
    """A copy of a forward's output as it is now (stream-ordered on CUDA)."""
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, (tuple, list)):
        return type(out)(_clone_output(o) for o in out)
    return out


def _same_output(a: Any, b: Any) -> bool:
    """Bitwise the same tensors (NaN matching NaN), through tuples and lists."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
        return torch.equal(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same_output(x, y) for x, y in zip(a, b, strict=True))
    return a is b or type(a) is type(b)


def _op_name(func: Any) -> str:
    return str(func.overloadpacket.__name__).rstrip("_")


def _init_vendor_math(device: torch.device) -> None:
    """Create cuBLAS and cuDNN handles now, under the sandbox's ``NVIDIA_TF32_OVERRIDE=0``, before
    candidate code can change the environment they read it from."""
    a = torch.ones(8, 8, device=device)
    (a @ a).sum().item()
    torch.nn.functional.conv2d(a.view(1, 1, 8, 8), a[:3, :3].reshape(1, 1, 3, 3)).sum().item()


class Candidate:
    """The candidate, loaded (``delegate``: asks the trusted side for a build its compile sandbox did
    not make, over the sandbox's channel)."""

    def __init__(self, request: CandidateLoad, delegate: Callable[[Delegation], BuildAnswer]) -> None:
        self.workdir = request.workdir
        self.target = request.target.value
        self.device = torch.device("cuda" if self.target == "cuda" else "cpu")
        self.trials = {t.index: t for t in request.trials}
        self.transport = request.transport
        #: Outputs handed over by CUDA IPC stay referenced until the next request.
        self._held: list[Any] = []
        # First: bound before any of the problem's or the candidate's code runs.
        self.meter = Meter.load(request.meter_path, self.device)
        self.noop = NoopSwitch()
        self.cache = BuildCache(request.builds_dir, mode="load", arch_list=request.arch_list, delegate=delegate,
                                on_module=self.noop.wrap_module)
        self.cache.install()
        self.problem = load_problem_module(request.problem, self.target)
        self.random = request.problem.random
        self.cache.phase = BuildPhase.IMPORT
        candidate = load_candidate_module(request.candidate_path)
        if not hasattr(candidate, "ModelNew"):
            raise AttributeError("the candidate defines no class ModelNew")
        init_inputs = self.problem.get_init_inputs()
        torch.manual_seed(request.init_seed)
        with contract.registrations() as ranks:
            reference = self.problem.Model(*init_inputs)
        weights = contract.in_registration_order(
            reference, contract.redraw_weights(reference, request.weights_seed), ranks)
        del reference
        torch.manual_seed(request.init_seed)
        self.cache.phase = BuildPhase.INIT
        with contract.registrations() as ranks:
            self.model = candidate.ModelNew(*self.problem.get_init_inputs())
        self.cache.phase = None
        loading = contract.reference_weights_for(
            weights, contract.in_registration_order(self.model, self.model.state_dict(), ranks))
        self.model.load_state_dict(loading.state, strict=False)
        #: (Model's name, ModelNew's name) of the weights loaded by registration order.
        self.renamed = loading.renamed
        self.model.train(request.problem.mode.value == "train").to(self.device)
        self.threads_at_start = _active_count()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def run_trial(self, index: int, *, noop: bool = False, record_ops: bool = False) -> TrialReply:
        inputs = contract.make_inputs(self.problem, self.trials[index], self.device)
        originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        flags: list[str] = []
        ops: set[str] = set()
        self.noop.active = noop
        self.noop.take_raised()  # what earlier requests raised is theirs
        self.cache.phase = BuildPhase.FORWARD
        contract.seed_forward(self.trials[index].seed)
        try:
            with torch.no_grad():
                if record_ops:
                    from torch.utils._python_dispatch import TorchDispatchMode

                    class Recorder(TorchDispatchMode):
                        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                                               kwargs: Any = None) -> Any:
                            ops.add(_op_name(func))
                            return func(*args, **(kwargs or {}))

                    with Recorder():  # type: ignore[no-untyped-call]  # torch's __init__ is untyped
                        out = self.model(*inputs)
                else:
                    out = self.model(*inputs)
            # The output must be complete when forward's stream is: copy it then (stream-ordered
            # on CUDA), let any work left running elsewhere go on, and compare.
            if self.device.type == "cuda":
                torch.cuda.current_stream().synchronize()
            snapshot = _clone_output(out)
            self._sync()
        finally:
            self.noop.active = False
            self.cache.phase = None
        if not contract.tf32_is_off():
            flags.append("tf32_enabled")
            contract.tf32_off()
        for x, orig in zip(inputs, originals, strict=True):
            if isinstance(x, torch.Tensor) and not torch.equal(x, orig):
                flags.append("mutated_inputs")
                break
        if _active_count() > self.threads_at_start:
            flags.append("background_threads")
        _sleep(_SETTLE_S)
        self._sync()
        if not _same_output(snapshot, out):
            flags.append("deferred_work")
        tampered = self.meter.tampered()
        if tampered:
            flags.append(Flag.HARNESS_TAMPERED)
        name = f"{'noop' if noop else 'trial'}-{index}"
        self._held = [snapshot]
        return TrialReply(output=export_output(snapshot, self.workdir, name, transport=self.transport),
                          flags=tuple(flags), ops=tuple(sorted(ops)) if record_ops else None,
                          kernel_errors=self.noop.take_raised(), tampered=tuple(tampered))

    def time(self, channel: Channel, request: TimeRequest) -> MeterEnd:
        """Hand the model to the metered loop (`harness.meter`): the trusted side drives it."""
        sets = [contract.make_inputs(self.problem, self.trials[i], self.device) for i in request.sets]
        self._held = []
        channel.send(Metering())
        calls = self.meter.run(channel, self.model, sets, flush=request.flush)
        flags = []
        if _active_count() > self.threads_at_start:
            flags.append(Flag.BACKGROUND_THREADS)
        return MeterEnd(calls=calls, flags=tuple(flags), tampered=tuple(self.meter.tampered()))

    def profile(self, calls: int = 5) -> ProfileReply:
        """Per-kernel totals over a few calls, from the torch profiler (device time on CUDA)."""
        from torch.profiler import ProfilerActivity, profile

        inputs = contract.make_inputs(self.problem, self.trials[0], self.device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        cuda = self.device.type == "cuda"
        with torch.no_grad():
            self.model(*inputs)  # warm-up outside the profile
            self._sync()
            self.noop.label_calls = not cuda  # on a GPU its kernels show by themselves
            try:
                with profile(activities=activities) as prof:
                    for _ in range(calls):
                        self.model(*inputs)
                    self._sync()
            finally:
                self.noop.label_calls = False
        rows = []
        for event in prof.key_averages():
            total_us = event.device_time_total if cuda else event.self_cpu_time_total
            if total_us <= 0 or (cuda and event.device_time_total <= 0):
                continue
            rows.append(ProfileRow(name=event.key[:160], calls=event.count // calls,
                                   ms_per_forward=total_us / 1e3 / calls))
        rows.sort(key=lambda r: r.ms, reverse=True)
        return ProfileReply(kernels=tuple(rows[:25]))


def serve(channel: Channel) -> None:
    # Start-up before any candidate code (the referee may start this sandbox ahead of its attempt
    # and waits for "ready"): TF32 off, and on a GPU the context and vendor handles made now.
    contract.tf32_off()
    if torch.cuda.is_available():
        _init_vendor_math(torch.device("cuda"))
    channel.send(Ready())
    request = CandidateLoad.from_dict(channel.recv())

    def delegate(build: Delegation) -> BuildAnswer:
        channel.send(build)
        return BuildAnswer.from_dict(channel.recv())

    try:
        candidate = Candidate(request, delegate)
    except contract.WeightsMismatch as exc:
        channel.send(StartFailed(message="the reference weights do not fit ModelNew", errors=str(exc)))
        return
    except BaseException as exc:  # noqa: BLE001 - every load failure is the candidate's, reported
        channel.send(StartFailed(message="loading the candidate failed", errors=brief_error(exc)))
        return
    channel.send(Loaded(extensions=tuple(m.__name__ for m in candidate.cache.modules), renamed=candidate.renamed,
                        kernel_errors=candidate.noop.take_raised()))
    while True:
        message = channel.recv()
        op = op_of(message)
        reply: SandboxMessage
        try:
            if op is Op.EXIT:
                return
            if op is Op.TRIAL:
                trial = TrialRequest.from_dict(message)
                reply = candidate.run_trial(trial.index, noop=trial.noop, record_ops=trial.record_ops)
            elif op is Op.PROFILE:
                reply = candidate.profile()
            elif op is Op.TIME:
                reply = candidate.time(channel, TimeRequest.from_dict(message))
            else:
                reply = OpFailed(error=f"unknown op {message.get('op')!r}")
        except BaseException as exc:  # noqa: BLE001 - a crash in forward is the candidate's
            reply = OpFailed(error=brief_error(exc))
        channel.send(reply)
