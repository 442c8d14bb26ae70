"""The adversarial suite on CUDA (`pytest -m gpu`, on an H200): the cheats that matter on a GPU.

Same layout as tests/harness/integrity/test_integrity_cpu.py: a table of cheats, each the seed-1 CUDA
example with ``ModelNew.forward`` overridden (one CUDA build serves them all), one `Referee` for
the module, and the reason each must be caught. Needs only torch, the standard library and pytest.
Figures go to stdout (run with -s) as INTEGRITY-GPU lines, and to KERNELLOOP_GPU_REPORT if set.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee, Timeouts, TimingOptions
from harness.retime import retime_options
from problems import load_problem
from problems.spec import Problem, parse_problem
from tests.support.gpu import report
from tests.support.integrity import forged_loop
from tests.support.paths import REPO
from vocabulary.evaluation import Depth
from vocabulary.verdict import Stage, Status, Verdict

pytestmark = pytest.mark.gpu

SEED1_CUDA = (REPO / "examples" / "seed1_cuda.py").read_text()
PROBLEM = "level2/conv_tanh_scale_bias_maxpool"
# Every one of the first ten timed calls audited, as in the CPU suite (tests/support/integrity.py).
QUICK_TIMING = TimingOptions(warmup_ms=10, min_repeats=10, max_repeats=40, max_time_s=0.3, input_sets=2,
                             audits=10)
LEAK = "LEAK"
#: Host memory of a sandbox (RLIMIT_DATA on cuda): the legit candidate must run under it.
MEMORY_LIMIT_MB = 8192
#: GPU cycles a cheat spins on its side stream (~10 ms at 2 GHz): still running when forward returns.
SPIN_CYCLES = 20_000_000


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kept = os.environ.get("KERNELLOOP_TEST_CACHE")
    return Path(kept) if kept else tmp_path_factory.mktemp("gpu-integrity-cache")


@pytest.fixture(scope="module")
def referee(cache: Path) -> Iterator[Referee]:
    options = HarnessOptions(
        cache_dir=cache, secret_seed=20261201, trials=2, compile_baseline=False, timing=QUICK_TIMING,
        timeouts=Timeouts(trial_s=15.0, load_s=120.0, timing_s=120.0, compile_s=600.0),
        memory_limit_mb=MEMORY_LIMIT_MB,
    )
    with Referee(small_seed1(), "cuda", options) as ref:
        yield ref


def small_seed1() -> Problem:
    """Seed problem 1 with a batch of 16 instead of 128: every trial's inputs are drawn on the host."""
    source = load_problem(PROBLEM).source
    assert "batch_size = 128" in source
    return parse_problem(source.replace("batch_size = 128", "batch_size = 16"), problem_id="integrity/seed1_b16",
                         level=2)


def _report(entry: dict) -> None:
    report(entry, tag="INTEGRITY-GPU")


_HELPERS = '''

_Seed = ModelNew


def _honest(self, x):
    return _Seed.forward(self, x)


def _out_shape(self, x):
    k = self.pool_kernel_size
    return (x.shape[0], self.conv.out_channels, (x.shape[2] - 2) // k, (x.shape[3] - 2) // k)


def _count(self):
    self.__dict__["_calls"] = self.__dict__.get("_calls", 0) + 1
    return self.__dict__["_calls"]


def _on_a_side_stream(self, x):
    """The kernel on another stream that forward's stream never waits for, after a long spin."""
    side = self.__dict__.setdefault("_side", torch.cuda.Stream())
    y = F.conv2d(x, self.conv.weight, self.conv.bias)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(SPIN_CYCLES)
        return _ext.pool_tanh_scale_bias(y, self.bias, self.pool_kernel_size, float(self.scaling_factor))
'''


def cheat(body: str, prelude: str = "") -> str:
    return (SEED1_CUDA + f"\nSPIN_CYCLES = {SPIN_CYCLES}\n" + _HELPERS + "\n" + textwrap.dedent(prelude)
            + "\n\nclass ModelNew(_Seed):\n    def forward(self, x):\n"
            + textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8) + "\n")


# A kernel that stores to address 0x10, loaded as PTX through the driver: no compile needed.
ILLEGAL_ACCESS = '''
import ctypes
_PTX = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry kl_bad_store(.param .u64 kl_bad_store_p)
{
  .reg .u32 %r<2>;
  .reg .u64 %rd<2>;
  ld.param.u64 %rd1, [kl_bad_store_p];
  mov.u32 %r1, 1;
  st.global.u32 [%rd1], %r1;
  ret;
}
"""


def _illegal_store():
    cuda = ctypes.CDLL("libcuda.so.1")
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    assert cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(_PTX)) == 0, "cuModuleLoadData"
    assert cuda.cuModuleGetFunction(ctypes.byref(function), module, b"kl_bad_store") == 0, "cuModuleGetFunction"
    address = ctypes.c_uint64(0x10)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(address), ctypes.c_void_p))
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    assert cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, params, None) == 0, "cuLaunchKernel"
'''


# A persisting L2 access-policy window over a tensor, set on the current stream through the CUDA
# runtime torch loaded (cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize) and
# cudaStreamSetAttribute(cudaStreamAttributeAccessPolicyWindow)).
#: What the cheat says when the GPU refuses its window (the test then has nothing to judge).
L2_REFUSED = "this GPU refuses a persisting L2 window"
PERSISTING_L2 = f'''
import ctypes, os

L2_REFUSED = {L2_REFUSED!r}


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _Value(ctypes.Union):
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


def _cudart():
    torch.cuda.init()
    with open("/proc/self/maps") as fh:
        for line in fh:
            path = line.split()[-1]
            if "libcudart.so" in os.path.basename(path):
                return ctypes.CDLL(path)
    return ctypes.CDLL("libcudart.so")


def _persist(t):
    rt = _cudart()
    size = min(t.numel() * t.element_size(), torch.cuda.get_device_properties(t.device).L2_cache_size * 3 // 4)
    _refused(rt, rt.cudaDeviceSetLimit(6, ctypes.c_size_t(size)), "cudaDeviceSetLimit")  # PersistingL2CacheSize
    value = _Value()
    value.accessPolicyWindow = _Window(t.data_ptr(), size, 1.0, 2, 1)  # persisting on hit, streaming on miss
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    _refused(rt, rt.cudaStreamSetAttribute(stream, 1, ctypes.byref(value)), "cudaStreamSetAttribute")


def _refused(rt, error, call):
    # An unchecked failure stays the runtime's last error and surfaces at torch's next launch
    # as "invalid argument" (an H100 in a VM, session 10): say which call the GPU refused.
    if error:
        rt.cudaGetLastError()
        raise RuntimeError(f"{{L2_REFUSED}}: {{call}} returned {{error}}")
'''


def next_evaluation_works(verdict: Verdict, referee: Referee) -> None:
    after = referee.evaluate(SEED1_CUDA, depth=Depth.CORRECTNESS)
    assert after.status is Status.PASS, f"{after.message}\n{after.log[-3000:]}"


def illegal_access_then_next_works(verdict: Verdict, referee: Referee) -> None:
    assert any(m in verdict.message for m in ("illegal memory access", "CUDA error", "CUDNN_STATUS")), verdict.message
    next_evaluation_works(verdict, referee)


def honest_speed(verdict: Verdict, referee: Referee) -> None:
    assert verdict.speedup_vs_eager is not None and verdict.speedup_vs_eager < referee.options.suspicious_speedup
    assert not {"speedup_over_limit", "faster_than_roofline"} & set(verdict.flags)


@dataclass(frozen=True)
class Case:
    id: str
    source: Callable[[int], str]  # gets the number of calls a candidate sees before timing
    status: Status
    stage: Stage | None = None
    flags: tuple[str, ...] = ()
    any_flags: tuple[str, ...] = ()
    message: str = ""
    depth: Depth = Depth.CORRECTNESS
    check: Callable[[Verdict, Referee], None] | None = None


CASES: list[Case] = [
    Case("zeros", lambda n: cheat("return torch.zeros(_out_shape(self, x), device=x.device)"),
         Status.FAIL, Stage.CORRECTNESS, message="trials failed"),
    Case("uninitialised_output", lambda n: cheat("return torch.empty(_out_shape(self, x), device=x.device)"),
         Status.FAIL, Stage.CORRECTNESS, message="trials failed"),
    Case("side_stream_without_sync", lambda n: cheat("return _on_a_side_stream(self, x)"),
         Status.FAIL, flags=("deferred_work",)),
    # Timed only: the timed window's end event is on forward's stream, but the loop synchronises
    # the whole device before it answers, so the trusted clock times the side stream's spin too.
    Case("side_stream_only_while_timed", lambda n: cheat(f'''
        if _count(self) <= {n}:
            return _honest(self, x)
        return _on_a_side_stream(self, x)'''),
         Status.FAIL, Stage.INTEGRITY, flags=("clock_disagrees",), depth=Depth.BENCHMARK),
    Case("output_filled_by_a_background_thread", lambda n: cheat('''
        import threading, time
        out = torch.zeros(_out_shape(self, x), device=x.device)
        def fill():
            time.sleep(0.05)
            out.copy_(_honest(self, x))
        threading.Thread(target=fill).start()
        return out'''),
         Status.FAIL, flags=("background_threads",)),
    Case("cache_by_data_ptr_after_the_trials", lambda n: cheat(f'''
        cache = self.__dict__.setdefault("_cache", {{}})
        if _count(self) > {n} and x.data_ptr() in cache:
            return cache[x.data_ptr()]
        cache[x.data_ptr()] = out = _honest(self, x)
        return out'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_mismatch",), depth=Depth.BENCHMARK),
    Case("half_the_work_on_half_the_timed_calls", lambda n: cheat(f'''
        import random
        out = _honest(self, x)
        if _count(self) > {n} and random.random() < 0.5:
            out = out * 0.5  # a guess that this call goes unchecked
        return out'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_mismatch",), depth=Depth.BENCHMARK),
    Case("patches_cuda_events_and_perf_counter", lambda n: cheat("return _honest(self, x)", prelude='''
        import time as _time
        _real_perf_counter = _time.perf_counter
        _time.perf_counter = lambda: _real_perf_counter() / 1000.0
        torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
        torch.cuda.Event.record = lambda self, stream=None: None
        '''),
         Status.PASS, Stage.DONE, depth=Depth.BENCHMARK, check=honest_speed),
    Case("scales_what_the_harness_records", lambda n: cheat("return _honest(self, x)", prelude='''
        import sys as _sys
        if "harness.sandboxed.meter" in _sys.modules:
            _meter = _sys.modules["harness.sandboxed.meter"]
            _run = _meter.Meter.run
            _meter.Meter.run = lambda self, *a, **k: _run(self, *a, **k)
        '''),
         Status.FAIL, Stage.INTEGRITY, flags=("harness_tampered",), message="harness.sandboxed.meter.Meter.run",
         depth=Depth.BENCHMARK),
    # Named at the first trial (the replacement is a changed harness function); with the tamper
    # check replaced too, the trusted clock says so (the next row).
    Case("replaces_the_timing_loop", lambda n: cheat("torch.cuda._sleep(SPIN_CYCLES)\nreturn _honest(self, x)",
                                                     prelude=forged_loop(0.3, device="cuda")),
         Status.FAIL, Stage.INTEGRITY, flags=("harness_tampered",), depth=Depth.BENCHMARK),
    Case("replaces_the_timing_loop_and_the_tamper_check", lambda n: cheat(
        "torch.cuda._sleep(SPIN_CYCLES)\nreturn _honest(self, x)",
        prelude=forged_loop(0.5, hide_tampering=True, device="cuda")),
         Status.FAIL, Stage.INTEGRITY, flags=("clock_disagrees",), depth=Depth.BENCHMARK),
    Case("returns_a_tensor_subclass_when_timed", lambda n: cheat(f'''
        class Lazy(torch.Tensor):
            pass
        out = _honest(self, x)
        return out.as_subclass(Lazy) if _count(self) > {n} else out'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_not_plain",), depth=Depth.BENCHMARK),
    Case("tf32_switched_on", lambda n: cheat('''
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return _honest(self, x)'''),
         Status.FAIL, flags=("tf32_enabled",)),
    Case("tf32_switched_on_at_import_new_api", lambda n: cheat("return _honest(self, x)", prelude='''
        torch.backends.fp32_precision = "tf32"
        '''),
         Status.FAIL, flags=("tf32_enabled",)),
    # The fault is sticky: whatever touches the context next reports it (the harness's sync here;
    # a cuDNN call reported CUDNN_STATUS_INTERNAL_ERROR when the fault came before the conv).
    Case("illegal_memory_access", lambda n: cheat(
        "out = _honest(self, x)\n_illegal_store()\nreturn out", prelude=ILLEGAL_ACCESS),
         Status.ERROR, Stage.CORRECTNESS, message="forward raised", check=illegal_access_then_next_works),
    Case("device_out_of_memory", lambda n: cheat('''
        chunks = []
        for _ in range(400):  # 400 GiB: more than any GPU has
            chunks.append(torch.empty(1 << 30, dtype=torch.uint8, device=x.device))
        return _honest(self, x)'''),
         Status.ERROR, Stage.CORRECTNESS, message="out of memory", check=next_evaluation_works),
    Case("host_out_of_memory", lambda n: cheat('''
        chunks = []
        for _ in range(24):  # 24 GiB at most: the sandbox's limit must stop it long before
            chunk = torch.empty(1 << 28)
            chunk[::1024].fill_(1.0)
            chunks.append(chunk)
        return _honest(self, x)'''),
         Status.ERROR, Stage.CORRECTNESS, message="allocate memory"),
    Case("hang", lambda n: cheat("while True:\n    pass"),
         Status.ERROR, Stage.CORRECTNESS, message="timed out"),
]


def test_legit_seed1_cuda_passes(referee: Referee) -> None:
    verdict = referee.evaluate(SEED1_CUDA)
    _report({"case": "legit_seed1_cuda", "status": verdict.status.value, "stage": verdict.stage.value,
             "flags": list(verdict.flags), "median_ms": verdict.timing.median_ms if verdict.timing else None,
             "speedup_vs_eager": verdict.speedup_vs_eager, "sandbox": verdict.provenance.to_dict().get("sandbox"),
             "compile_s": verdict.compile.seconds if verdict.compile else None})
    assert verdict.status is Status.PASS, f"{verdict.message}\n{verdict.log[-3000:]}"
    assert verdict.stage is Stage.DONE and not verdict.flags


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cuda_cheat_is_caught(case: Case, referee: Referee) -> None:
    calls_before_timing = len(referee.trials) + 1
    started = time.monotonic()
    verdict = referee.evaluate(case.source(calls_before_timing), depth=case.depth)
    elapsed = time.monotonic() - started
    summary = f"{verdict.status.value} {verdict.stage.value} {verdict.flags}: {verdict.message[:1500]}"
    _report({"case": case.id, "status": verdict.status.value, "stage": verdict.stage.value,
             "flags": list(verdict.flags), "message": verdict.message[:300], "seconds": round(elapsed, 1)})
    assert LEAK not in verdict.message, summary
    assert verdict.status is case.status, summary + "\n" + verdict.log[-3000:]
    if case.stage is not None:
        assert verdict.stage is case.stage, summary
    assert set(case.flags) <= set(verdict.flags), summary
    if case.any_flags:
        assert set(case.any_flags) & set(verdict.flags), summary
    assert case.message.lower() in verdict.message.lower(), summary
    if case.check is not None:
        case.check(verdict, referee)


def test_an_input_kept_in_l2_across_the_flush_gains_nothing(referee: Referee) -> None:
    """The input kept resident in L2 across the flush by a persisting access-policy window on
    forward's stream: after every call the loop makes persisting lines normal again and sets no L2
    aside for them, so the window carries nothing across the flush. What setting the L2 aside again
    costs around each call (233 us on the H200 in session 7) is close to the trusted clock's
    allowance (half the loop's ~350 us), so it is either rejected (`clock_disagrees`) or timed as
    what it is: never faster than the same kernel without the window (0.1 % is the H200's
    run-to-run spread; 3 % allowed)."""
    honest = referee.evaluate(SEED1_CUDA, depth=Depth.BENCHMARK)
    verdict = referee.evaluate(cheat("_persist(x)\nreturn _honest(self, x)", prelude=PERSISTING_L2),
                               depth=Depth.BENCHMARK)
    bound = verdict.timing.bound if verdict.timing else None
    _report({"case": "keeps_its_input_in_l2_across_the_flush", "status": verdict.status.value,
             "flags": list(verdict.flags), "median_ms": verdict.timing.median_ms if verdict.timing else None,
             "honest_median_ms": honest.timing.median_ms if honest.timing else None,
             "excess_us": round(1e3 * bound.excess_ms) if bound else None,
             "allowed_us": round(1e3 * bound.allowed_ms) if bound else None})
    summary = f"{verdict.status.value} {verdict.stage.value} {verdict.flags}: {verdict.message[:1500]}"
    assert honest.status is Status.PASS and honest.timing is not None, honest.message
    if verdict.status is Status.ERROR and L2_REFUSED in verdict.message:
        pytest.skip(f"no persisting L2 window on this GPU, so nothing to carry across the flush: {summary}")
    if verdict.status is Status.FAIL:
        assert verdict.stage is Stage.INTEGRITY and "clock_disagrees" in verdict.flags, summary
    else:
        assert verdict.status is Status.PASS and verdict.timing is not None, summary
        assert verdict.timing.median_ms >= 0.97 * honest.timing.median_ms, (verdict.timing, honest.timing)


# -- the re-time (a quarantined candidate, a job's best): a fresh Referee, fresh seeds ------------
@pytest.fixture(scope="module")
def retime_referee(referee: Referee) -> Iterator[Referee]:
    """What the worker's re-time does (`harness.retime.retime_options`): fresh secret seeds, no
    speedup ceiling, a longer metered run."""
    with Referee(small_seed1(), "cuda", retime_options(referee.options)) as ref:
        yield ref


def test_legit_seed1_cuda_passes_the_retime(retime_referee: Referee) -> None:
    for _ in range(2):  # the trusted clock's bound is one-sided: an honest candidate fits it, run after run
        verdict = retime_referee.evaluate(SEED1_CUDA)
        bound = verdict.timing.bound if verdict.timing is not None else None
        _report({"case": "legit_seed1_cuda_retime", "status": verdict.status.value, "flags": list(verdict.flags),
                 "median_ms": verdict.timing.median_ms if verdict.timing else None,
                 "trusted_clock": bound.to_dict() if bound is not None else None, "message": verdict.message[-400:]})
        assert verdict.status is Status.PASS, f"{verdict.message}\n{verdict.log[-3000:]}"
        assert not verdict.flags and verdict.provenance.timing_mode == "metered, re-judged"


#: Turns TF32 on inside forward (and off again before returning, so no after-call check sees it),
#: measures a matmul's error against float64 and reports it through the error message.
TF32_PROBE = '''
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(2048, 2048, device="cuda", generator=g)
b = torch.randn(2048, 2048, device="cuda", generator=g)
err = ((a @ b).double() - a.double() @ b.double()).abs().max().item()
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
raise RuntimeError(f"tf32-probe max-err {err:.3e}")
'''


def _probe_error(text: str) -> float:
    match = re.search(r"tf32-probe max-err ([0-9.e+-]+)", text)
    assert match, text[-2000:]
    return float(match.group(1))


def test_tf32_cannot_take_effect_in_a_candidate(referee: Referee) -> None:
    """TF32 switched on between the harness's checks still computes in fp32 (NVIDIA_TF32_OVERRIDE)."""
    verdict = referee.evaluate(cheat(TF32_PROBE), depth=Depth.CORRECTNESS)
    sandboxed = _probe_error(verdict.message + verdict.log)
    # The same probe outside the harness: TF32 really changes this matmul there.
    env = {k: v for k, v in os.environ.items() if k != "NVIDIA_TF32_OVERRIDE"}
    script = "import torch\ndef probe():\n" + textwrap.indent(TF32_PROBE, "    ") + "probe()\n"
    plain = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    unsandboxed = _probe_error(plain.stderr)
    _report({"case": "tf32_toggled_inside_forward", "sandboxed_max_err": sandboxed,
             "unsandboxed_max_err": unsandboxed})
    assert unsandboxed > 10 * sandboxed, (sandboxed, unsandboxed)
