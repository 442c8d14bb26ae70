"""The untrusted candidate process: one per attempt, fresh each time.

It may start before its attempt (the referee prestarts it): torch imported, TF32 off, on a GPU the
context and vendor handles made, then "ready" and a wait. Its request brings derived seeds (never
the job's secret, never expected outputs); it loads the built extensions from the read-only copies
of its own builds in its run directory, builds ``ModelNew`` with the reference weights, and on
request runs trials, the no-op substitution trial, and the timing loop, writing outputs into
its private directory for the comparer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

from harness import contract
from harness import timing as timing_mod  # binds the clocks before candidate code is imported
from harness.buildcache import BuildCache
from harness.channel import Channel, StageMessage
from harness.options import TimingOptions
from harness.protocol import Op, OpFailed, Ready, StartFailed, op_of
from harness.protocol.candidate import (
    CandidateLoad,
    KeptOutput,
    Loaded,
    ProfileReply,
    TimeReply,
    TimeRequest,
    TrialReply,
    TrialRequest,
)
from harness.roles.loading import brief_error, load_candidate_module, load_problem_module
from harness.transfer import export_output
from harness.verdict import ProfileRow


class NoopSwitch:
    """Wraps every function of the candidate's extensions; when on, their effects become noise.

    "No-op" means: the real function runs (so shapes are right), then every tensor it returned
    and every tensor argument it changed is overwritten with random values. If the forward's
    output still matches the reference, the extension did no real work.
    """

    def __init__(self) -> None:
        self.active = False

    def wrap_module(self, module: Any) -> None:
        for name in dir(module):
            if name.startswith("_"):
                continue
            fn = getattr(module, name)
            if callable(fn) and not isinstance(fn, type):
                setattr(module, name, self._wrap(fn))

    def _wrap(self, fn: Any) -> Any:
        switch = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not switch.active:
                return fn(*args, **kwargs)
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            before = [t.clone() for t in tensors]
            result = fn(*args, **kwargs)
            for t, old in zip(tensors, before, strict=True):
                if t.is_floating_point() and not torch.equal(t, old):
                    t.copy_(torch.randn_like(t))
            return _poison(result)

        wrapper.__name__ = getattr(fn, "__name__", "wrapped")
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        return wrapper


def _poison(result: Any) -> Any:
    if isinstance(result, torch.Tensor):
        return torch.randn_like(result) if result.is_floating_point() else torch.zeros_like(result)
    if isinstance(result, (tuple, list)):
        return type(result)(_poison(r) for r in result)
    return result


# Bound before candidate code runs: a candidate patching these does not blind the checks.
_sleep = time.sleep
_active_count = threading.active_count
#: How long a trial's output is left alone before it is compared with its copy taken when
#: forward returned: work still writing it (a thread, another stream) shows up as a change.
_SETTLE_S = 0.01


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
    """Create cuBLAS and cuDNN handles now, under the stage's ``NVIDIA_TF32_OVERRIDE=0``, before
    candidate code can change the environment they read it from."""
    a = torch.ones(8, 8, device=device)
    (a @ a).sum().item()
    torch.nn.functional.conv2d(a.view(1, 1, 8, 8), a[:3, :3].reshape(1, 1, 3, 3)).sum().item()


class Candidate:
    def __init__(self, request: CandidateLoad) -> None:
        self.workdir = request.workdir
        self.target = request.target.value
        self.device = torch.device("cuda" if self.target == "cuda" else "cpu")
        self.trials = {t.index: t for t in request.trials}
        self.transport = request.transport
        #: Outputs handed over by CUDA IPC stay referenced until the next request.
        self._held: list[Any] = []
        self.cache = BuildCache(request.builds_dir, mode="load", arch_list=request.arch_list)
        self.cache.install()
        self.noop = NoopSwitch()
        self.problem = load_problem_module(request.problem, self.target)
        self.random = request.problem.random
        candidate = load_candidate_module(request.candidate_path)
        for module in self.cache.modules:
            self.noop.wrap_module(module)
        if not hasattr(candidate, "ModelNew"):
            raise AttributeError("the candidate defines no class ModelNew")
        init_inputs = self.problem.get_init_inputs()
        torch.manual_seed(request.init_seed)
        reference = self.problem.Model(*init_inputs)
        weights = contract.redraw_weights(reference, request.weights_seed)
        del reference
        torch.manual_seed(request.init_seed)
        self.model = candidate.ModelNew(*self.problem.get_init_inputs())
        mismatch = contract.state_dict_mismatch(weights, self.model.state_dict())
        if mismatch:
            raise ValueError(mismatch)
        self.model.load_state_dict(weights, strict=False)
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
            snapshot = timing_mod.clone_output(out)
            self._sync()
        finally:
            self.noop.active = False
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
        name = f"{'noop' if noop else 'trial'}-{index}"
        self._held = [snapshot]
        return TrialReply(output=export_output(snapshot, self.workdir, name, transport=self.transport),
                          flags=tuple(flags), ops=tuple(sorted(ops)) if record_ops else None)

    def time(self, options: TimingOptions, set_indices: tuple[int, ...], first_call: int = 0) -> TimeReply:
        sets = [contract.make_inputs(self.problem, self.trials[i], self.device) for i in set_indices]
        run = timing_mod.time_callable(self.model, sets, device=self.device, options=options, keep_outputs=True,
                                       first_call=first_call, seed_calls=self.random)
        self._held = [out for _, _, out in run.kept]
        kept = tuple(KeptOutput(index=set_indices[s], call=call,
                                output=export_output(out, self.workdir, f"timed-{call}", transport=self.transport))
                     for call, s, out in run.kept)
        flags = []
        if not contract.tf32_is_off():
            flags.append("tf32_enabled")
            contract.tf32_off()
        if _active_count() > self.threads_at_start:
            flags.append("background_threads")
        return TimeReply(timing=run.timing, kept=kept, wall_s=run.wall_s, flags=tuple(flags))

    def profile(self, calls: int = 5) -> ProfileReply:
        """Per-kernel totals over a few calls, from the torch profiler (device time on CUDA)."""
        from torch.profiler import ProfilerActivity, profile

        inputs = contract.make_inputs(self.problem, self.trials[0], self.device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        with torch.no_grad():
            self.model(*inputs)  # warm-up outside the profile
            self._sync()
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    self.model(*inputs)
                self._sync()
        cuda = self.device.type == "cuda"
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
    # Start-up before any candidate code (the referee may start this stage ahead of its attempt
    # and waits for "ready"): TF32 off, and on a GPU the context and vendor handles made now.
    contract.tf32_off()
    if torch.cuda.is_available():
        _init_vendor_math(torch.device("cuda"))
    channel.send(Ready())
    request = CandidateLoad.from_dict(channel.recv())
    try:
        candidate = Candidate(request)
    except BaseException as exc:  # noqa: BLE001 - every load failure is the candidate's, reported
        channel.send(StartFailed(message="loading the candidate failed", errors=brief_error(exc)))
        return
    channel.send(Loaded(extensions=tuple(m.__name__ for m in candidate.cache.modules)))
    while True:
        message = channel.recv()
        op = op_of(message)
        reply: StageMessage
        try:
            if op is Op.EXIT:
                return
            if op is Op.TRIAL:
                trial = TrialRequest.from_dict(message)
                reply = candidate.run_trial(trial.index, noop=trial.noop, record_ops=trial.record_ops)
            elif op is Op.PROFILE:
                reply = candidate.profile()
            elif op is Op.TIME:
                timed = TimeRequest.from_dict(message)
                reply = candidate.time(timed.timing, timed.sets, timed.first_call)
            else:
                reply = OpFailed(error=f"unknown op {message.get('op')!r}")
        except BaseException as exc:  # noqa: BLE001 - a crash in forward is the candidate's
            reply = OpFailed(error=brief_error(exc))
        channel.send(reply)
