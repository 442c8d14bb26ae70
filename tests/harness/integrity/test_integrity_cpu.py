"""The adversarial suite on the CPU target: candidates that cheat, each with the reason it is caught.

Every cheat is a row of `CASES`: an id, a function building its source, and what the referee must
answer (status, stage, flags, words of the message, or a check of its own). Almost every cheat is
the seed-1 CPU example with ``ModelNew.forward`` overridden, or with module-level code appended:
its extension sources stay byte-identical, so one build serves them all, and one `Referee` (one
trusted reference process) serves the whole module. "Probe" rows try to reach something they must
not (a secret, a socket, a file, another process) and raise ``LEAK`` if they do; they must pass.

The legit candidates (seed 1, seed 2 in train mode, a pure-policy kernel) pass: no false rejections.
docs/integrity.md lists what each check defends against and what it does not.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness import Referee
from problems import load_problem
from problems.spec import parse_problem
from tests.support.integrity import forged_loop, make_options
from tests.support.paths import REPO
from tests.support.processes import processes_with_arg
from vocabulary.evaluation import Depth
from vocabulary.flags import NOTICE_FLAGS
from vocabulary.verdict import Stage, Status, Verdict

pytestmark = pytest.mark.slow

SEED1_CPU = (REPO / "examples" / "seed1_cpu.py").read_text()
SEED2_CPU = (REPO / "examples" / "seed2_train_cpu.py").read_text()
SEED1_PROBLEM = "level2/conv_tanh_scale_bias_maxpool"
#: What a probe raises when it reached something it must not.
LEAK = "LEAK"


def findings(verdict: Verdict) -> set[str]:
    """The verdict's flags less notices (``host_loaded``: a busy CI host says so, it finds nothing)."""
    return set(verdict.flags) - NOTICE_FLAGS


# -- the world a probe looks for -------------------------------------------------------------
@dataclass
class World:
    """Things planted around the referee for probes to find (they must not)."""

    cache: Path
    token: str
    secret_dir: Path
    db_file: Path
    canary: str
    tcp_port: int
    abstract_socket: str
    unix_socket: Path
    planted_run: Path
    trial_calls: int = 0
    listeners: list[socket.socket] = field(default_factory=list)

    @property
    def sleep_arg(self) -> str:
        """A `sleep` argument unique to this run (so stray processes can be found by it)."""
        return self.token


@pytest.fixture(scope="module")
def world(harness_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    token = f"{4000 + os.getpid() % 1000}.{time.time_ns() % 10**6}"
    secret_dir = tmp_path_factory.mktemp("service-data")
    canary = f"kl-canary-{time.time_ns()}"
    db_file = secret_dir / "kernelloop.db"
    db_file.write_text(f"SQLite format 3 {canary}")
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    abstract = f"kl-integrity-{token}"
    abstract_listener = socket.socket(socket.AF_UNIX)
    abstract_listener.bind("\0" + abstract)
    abstract_listener.listen(8)
    unix_path = Path(f"/tmp/kl-integrity-{token}.sock")
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(str(unix_path))
    unix_listener.listen(8)
    # A failed attempt's directory with outputs left behind: the kind of file a cheat would look for.
    planted = harness_cache / "runs" / f"attempt-kl-planted-{os.getpid()}"
    (planted / "run").mkdir(parents=True, exist_ok=True)
    (planted / "run" / "trial-0.bin").write_text(canary)
    found = World(cache=harness_cache, token=token, secret_dir=secret_dir, db_file=db_file, canary=canary,
                  tcp_port=tcp.getsockname()[1], abstract_socket=abstract, unix_socket=unix_path,
                  planted_run=planted, listeners=[tcp, abstract_listener, unix_listener])
    # Secrets in the worker's environment: sandboxes are spawned with an allowlisted one.
    saved = {k: os.environ.get(k) for k in ("KL_SECRET_API_KEY", "DATABASE_URL", "OPENAI_API_KEY")}
    os.environ.update(KL_SECRET_API_KEY=canary, DATABASE_URL=f"postgresql://u:{canary}@localhost/db",
                      OPENAI_API_KEY=canary)
    try:
        yield found
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for listener in found.listeners:
            listener.close()
        unix_path.unlink(missing_ok=True)
        import shutil

        shutil.rmtree(planted, ignore_errors=True)


@pytest.fixture(scope="module")
def referee(world: World) -> Iterator[Referee]:
    options = make_options(world.cache, hidden_paths=(world.secret_dir,))
    with Referee(load_problem(SEED1_PROBLEM), "cpu", options) as ref:
        # Calls a candidate sees before timing: each correctness trial, then the no-op trial.
        world.trial_calls = len(ref.trials) + 1
        yield ref
    assert descendants(os.getpid()) == [], "a sandbox outlived its referee"


# -- building cheats -------------------------------------------------------------------------
_HELPERS = '''

_Seed = ModelNew


def _honest(self, x):
    """The seed's real forward: torch's conv, then the custom kernel."""
    return _Seed.forward(self, x)


def _torch(self, x):
    """The whole forward in torch, exactly as the reference computes it."""
    y = F.conv2d(x, self.conv.weight, self.conv.bias)
    return F.max_pool2d(torch.tanh(y) * self.scaling_factor + self.bias, self.pool_kernel_size)


def _out_shape(self, x):
    k = self.pool_kernel_size
    return (x.shape[0], self.conv.out_channels, (x.shape[2] - 2) // k, (x.shape[3] - 2) // k)


def _count(self):
    """How many times forward has been called in this process."""
    self.__dict__["_calls"] = self.__dict__.get("_calls", 0) + 1
    return self.__dict__["_calls"]
'''


def cheat(body: str, prelude: str = "") -> str:
    """The seed-1 example (same extension, same build) with module code and a forward that cheats."""
    return (SEED1_CPU + _HELPERS + "\n" + textwrap.dedent(prelude) + "\n\nclass ModelNew(_Seed):\n"
            "    def forward(self, x):\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8) + "\n")


def probe(search: str, prelude: str = "") -> str:
    """A cheat that looks for something; it raises LEAK if it finds it, else answers honestly."""
    leak = f"if found:\n    raise RuntimeError(f'{LEAK}: {{found!r}}'[:2000])\nreturn _honest(self, x)"
    return cheat("found = []\n" + textwrap.dedent(search).strip("\n") + "\n" + leak, prelude)


TORCH_ONLY = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scaling_factor = scaling_factor
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.pool_kernel_size = pool_kernel_size

    def forward(self, x):
        return F.max_pool2d(torch.tanh(self.conv(x)) * self.scaling_factor + self.bias, self.pool_kernel_size)
'''


# -- checks beyond status/stage/flags/message --------------------------------------------------
def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, frontier = [], [pid]
    while frontier:
        nxt = [c for p in frontier for c in children.get(p, [])]
        found.extend(nxt)
        frontier = nxt
    return found


def no_stray_process(verdict: Verdict, world: World, referee: Referee) -> None:
    deadline = time.monotonic() + 5
    while processes_with_arg(world.sleep_arg) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with_arg(world.sleep_arg) == [], "a process spawned by the candidate outlived its sandbox"


def next_evaluation_works(verdict: Verdict, world: World, referee: Referee) -> None:
    after = referee.evaluate(SEED1_CPU, depth=Depth.CORRECTNESS)
    assert after.status is Status.PASS, after.message + after.log


def honest_speed(verdict: Verdict, world: World, referee: Referee) -> None:
    """The patch did not reach the numbers: no quarantine, a speedup the kernel can really have."""
    assert verdict.timing is not None and verdict.speedup_vs_eager is not None
    assert verdict.speedup_vs_eager < referee.options.suspicious_speedup, verdict.to_dict()["timing"]
    assert not {"speedup_over_limit", "faster_than_roofline"} & set(verdict.flags)
    assert verdict.baselines is not None and verdict.baselines.eager is not None
    assert verdict.baselines.eager.median_ms < 20, "the baseline was slowed down"


def names(*changed: str) -> Callable[[Verdict, World, Referee], None]:
    """The verdict names each patched harness function, once."""
    def check(verdict: Verdict, world: World, referee: Referee) -> None:
        assert all(verdict.message.count(name) == 1 for name in changed), verdict.message
    return check


def partial_mismatch(verdict: Verdict, world: World, referee: Referee) -> None:
    failed = [t for t in verdict.trials if not t.passed]
    assert failed and all(0 < t.mismatch_frac < 1 for t in failed), [t.to_dict() for t in verdict.trials]


def close_but_beyond_tolerance(verdict: Verdict, world: World, referee: Referee) -> None:
    errors = [t.max_abs_err for t in verdict.trials if not t.passed]
    assert errors and all(e is not None and 1e-4 < e < 0.1 for e in errors), errors


def caught_at_second_trial(verdict: Verdict, world: World, referee: Referee) -> None:
    assert verdict.trials[0].passed and not verdict.trials[1].passed


def fp32_numerics(verdict: Verdict, world: World, referee: Referee) -> None:
    """The honest kernel's fp32 errors, far below the tolerance (TF32 would be ~1e-3)."""
    assert verdict.correct and not findings(verdict), verdict.flags
    errors = [t.max_abs_err for t in verdict.trials]
    assert all(e is not None and e < 1e-5 for e in errors), errors


def fallback_hint(verdict: Verdict, world: World, referee: Referee) -> None:
    assert any("try/except" in h for h in verdict.hints), verdict.hints


def no_host_files(verdict: Verdict, world: World, referee: Referee) -> None:
    for path in (Path(f"/tmp/kl-probe-{world.token}"), Path(f"/dev/shm/kl-probe-{world.token}"),
                 REPO / f"kl-probe-{world.token}", world.cache / f"kl-probe-{world.token}"):
        assert not path.exists(), f"{path} was written from inside the sandbox"


# The seed-1 build, hashed before the cases run, must not change.
_BUILD_HASHES: dict[str, str] = {}


def build_hashes(cache: Path) -> dict[str, str]:
    # The trusted builder's builds are in builds/trusted/, the compile sandboxes' at the top level.
    builds = cache / "builds"
    files = sorted([*builds.glob("kl_seed1_cpu-*/*"), *builds.glob("trusted/kl_seed1_cpu-*/*")])
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.suffix in (".so", ".json")}


def build_cache_intact(verdict: Verdict, world: World, referee: Referee) -> None:
    assert _BUILD_HASHES and build_hashes(world.cache) == _BUILD_HASHES, "the build cache was modified"
    assert not (world.cache / "builds" / f"kl-probe-{world.token}").exists()


# -- the table --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    id: str
    source: Callable[[World], str]
    status: Status
    stage: Stage | None = None
    #: Every one of these flags is raised.
    flags: tuple[str, ...] = ()
    #: At least one of these flags is raised.
    any_flags: tuple[str, ...] = ()
    #: Words of the verdict's message (case-insensitive).
    message: str = ""
    depth: Depth = Depth.CORRECTNESS
    check: Callable[[Verdict, World, Referee], None] | None = None
    #: Not caught yet, and why (the row is a strict xfail: it starts failing once it is caught).
    known_gap: str = ""


#: The candidate shares its process with the harness code that checks it; a cheat written against
#: that code can switch the in-process checks off. Only the trusted side's checks (the comparer,
#: the clock bound, the quarantine) hold against it.
IN_PROCESS = "in-process checks can be patched by a harness-aware candidate (docs/integrity.md: not defended)"

#: The no-op test asks whether the output depends on the extension; a forward that checks its
#: extension's answers and then computes with torch makes it depend, wherever the test runs.
SUBSTITUTION = ("a substitution test cannot tell a kernel that computes the output from one whose answers are "
                "only checked (docs/integrity.md: not defended)")

PASS_CONTAINED = dict(status=Status.PASS)  # a probe found nothing and answered honestly

CASES: list[Case] = [
    # --- no real custom kernel ---------------------------------------------------------------
    Case("torch_only", lambda w: TORCH_ONLY, Status.FAIL, Stage.INTEGRITY, flags=("no_custom_kernel",)),
    Case("kernel_built_but_unused", lambda w: cheat("return _torch(self, x)"),
         Status.FAIL, Stage.INTEGRITY, flags=("extension_does_no_work",)),
    Case("fallback_when_the_kernel_fails", lambda w: cheat('''
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        try:  # the kernel refuses float64, every time: torch answers
            return _ext.pool_tanh_scale_bias(y.double(), self.bias, self.pool_kernel_size, float(self.scaling_factor))
        except Exception:
            return F.max_pool2d(torch.tanh(y) * self.scaling_factor + self.bias, self.pool_kernel_size)'''),
         Status.FAIL, Stage.INTEGRITY, flags=("extension_does_no_work",), check=fallback_hint),
    Case("fallback_when_the_kernel_disagrees", lambda w: cheat('''
        mine, theirs = _honest(self, x), _torch(self, x)
        return mine if torch.allclose(mine, theirs, atol=1e-5) else theirs'''),
         Status.FAIL, Stage.INTEGRITY, flags=("extension_does_no_work",)),
    Case("kernel_result_times_zero", lambda w: cheat("return _torch(self, x) + 0.0 * _honest(self, x)"),
         Status.FAIL, Stage.INTEGRITY, flags=("extension_does_no_work",)),
    Case("calls_the_reference_model", lambda w: cheat('''
        import sys
        problem = sys.modules["kl_problem"]
        reference = problem.Model(*problem.get_init_inputs())
        reference.load_state_dict(self.state_dict(), strict=False)
        return reference(x)'''),
         Status.FAIL, Stage.INTEGRITY, flags=("extension_does_no_work",)),
    Case("memo_by_input_values", lambda w: cheat('''
        memo = self.__dict__.setdefault("_memo", {})
        flat = x.reshape(-1)
        key = (tuple(x.shape), float(flat[0]), float(flat[-1]), float(flat[flat.numel() // 2]))
        if key not in memo:  # the no-op trial repeats trial 0's inputs: the memo answers it
            memo[key] = _honest(self, x)
        return memo[key]'''),
         Status.FAIL, Stage.INTEGRITY, flags=("extension_does_no_work",)),
    # --- wrong answers --------------------------------------------------------------------------
    Case("zeros", lambda w: cheat("return torch.zeros(_out_shape(self, x))"),
         Status.FAIL, Stage.CORRECTNESS, message="trials failed"),
    Case("uninitialised_output", lambda w: cheat("return torch.empty(_out_shape(self, x))"),
         Status.FAIL, Stage.CORRECTNESS, message="trials failed"),
    Case("only_the_first_sample_computed", lambda w: cheat('''
        first = _honest(self, x[:1])
        return torch.cat([first, torch.zeros((x.shape[0] - 1, *first.shape[1:]))])'''),
         Status.FAIL, Stage.CORRECTNESS, message="trials failed", check=partial_mismatch),
    Case("half_precision", lambda w: cheat('''
        y = F.conv2d(x.half().float(), self.conv.weight.half().float(), self.conv.bias)
        return _ext.pool_tanh_scale_bias(y, self.bias, self.pool_kernel_size, float(self.scaling_factor))'''),
         Status.FAIL, Stage.CORRECTNESS, message="outside tolerance", check=close_but_beyond_tolerance),
    Case("wrong_dtype", lambda w: cheat("return _honest(self, x).double()"),
         Status.FAIL, Stage.CORRECTNESS, message="dtype torch.float64, expected torch.float32"),
    Case("wrong_shape", lambda w: cheat("return _honest(self, x).unsqueeze(0)"),
         Status.FAIL, Stage.CORRECTNESS, message="shape"),
    Case("hard_coded_for_default_seeds", lambda w: cheat('''
        import sys
        if "_answers" not in self.__dict__:  # outputs for the seeds people use: 0, 1, 2, 3
            problem = sys.modules["kl_problem"]
            answers = []
            for seed in range(4):
                torch.manual_seed(seed)
                answers.append(_honest(self, problem.get_inputs()[0]))
            self.__dict__["_answers"] = answers
        return self.__dict__["_answers"][(_count(self) - 1) % 4]'''),
         Status.FAIL, Stage.CORRECTNESS, message="trials failed"),
    Case("garbage_in_one_of_three_calls", lambda w: cheat('''
        out = _honest(self, x)
        return torch.randn_like(out) if _count(self) % 3 == 0 else out'''),
         Status.FAIL, Stage.CORRECTNESS, message="trials failed"),
    Case("gc_search_for_expected_outputs", lambda w: cheat('''
        import gc
        shape = _out_shape(self, x)
        for obj in gc.get_objects():  # expected outputs live in another process: none here
            if isinstance(obj, torch.Tensor) and tuple(obj.shape) == shape and obj.dtype == torch.float32:
                return obj.clone()
        return torch.zeros(shape)'''),
         Status.FAIL, Stage.CORRECTNESS, message="trials failed"),
    # --- state checks in the candidate process ---------------------------------------------------
    Case("mutates_its_input", lambda w: cheat('''
        out = _honest(self, x)
        x.zero_()
        return out'''),
         Status.FAIL, Stage.INTEGRITY, flags=("mutated_inputs",)),
    Case("tf32_switched_on_in_forward", lambda w: cheat('''
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return _honest(self, x)'''),
         Status.FAIL, Stage.INTEGRITY, flags=("tf32_enabled",)),
    Case("tf32_switched_on_at_import_new_api", lambda w: cheat("return _honest(self, x)", prelude='''
        torch.backends.fp32_precision = "tf32"
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        '''),
         Status.FAIL, Stage.INTEGRITY, flags=("tf32_enabled",)),
    Case("output_filled_by_a_background_thread", lambda w: cheat('''
        import threading, time
        out = torch.zeros(_out_shape(self, x))
        def fill():
            time.sleep(0.05)
            out.copy_(_honest(self, x))
        threading.Thread(target=fill).start()
        return out'''),
         Status.FAIL, Stage.CORRECTNESS, flags=("background_threads",)),
    # --- caught while timed: rotated inputs, re-checked outputs, threads after the loop -------------
    Case("cache_by_shape", lambda w: cheat('''
        cache = self.__dict__.setdefault("_cache", {})
        if tuple(x.shape) not in cache:
            cache[tuple(x.shape)] = _honest(self, x)
        return cache[tuple(x.shape)]'''),
         Status.FAIL, Stage.CORRECTNESS, message="trials failed", check=caught_at_second_trial),
    Case("cache_by_pointer_after_the_trials", lambda w: cheat(f'''
        cache = self.__dict__.setdefault("_cache", {{}})
        if _count(self) > {w.trial_calls} and x.data_ptr() in cache:
            return cache[x.data_ptr()]
        cache[x.data_ptr()] = out = _honest(self, x)
        return out'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_mismatch",), depth=Depth.BENCHMARK),
    Case("cache_by_shape_after_the_trials", lambda w: cheat(f'''
        cache = self.__dict__.setdefault("_cache", {{}})
        if _count(self) > {w.trial_calls} and tuple(x.shape) in cache:
            return cache[tuple(x.shape)]
        cache[tuple(x.shape)] = out = _honest(self, x)
        return out'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_mismatch",), depth=Depth.BENCHMARK),
    Case("garbage_in_every_other_timed_call", lambda w: cheat(f'''
        n, out = _count(self), _honest(self, x)
        return torch.randn_like(out) if n > {w.trial_calls} and n % 2 == 0 else out'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_mismatch",), depth=Depth.BENCHMARK),
    Case("deferred_to_a_thread_while_timed", lambda w: cheat(f'''
        import threading, time
        if _count(self) <= {w.trial_calls}:
            return _honest(self, x)
        out, inputs = torch.zeros(_out_shape(self, x)), x.clone()
        def fill():
            time.sleep(0.02)
            out.copy_(_honest(self, inputs))
        threading.Thread(target=fill, daemon=True).start()
        return out'''),
         # The audit catches it; `background_threads` comes too when a thread is still alive as the
         # loop ends, which a loaded host can take longer than the thread's 20 ms (seen once).
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_mismatch",), depth=Depth.BENCHMARK),
    Case("memo_by_input_values_while_timed", lambda w: cheat(f'''
        memo = self.__dict__.setdefault("_memo", {{}})
        flat = x.reshape(-1)
        key = (tuple(x.shape), float(flat[0]), float(flat[-1]), float(flat[flat.numel() // 2]))
        if _count(self) > {w.trial_calls} and key in memo:  # would be right answers with no work...
            raise RuntimeError("{LEAK}: a timed call repeated an earlier call's inputs")
        out = _honest(self, x)
        memo.setdefault(key, out)
        return out'''),
         Status.PASS, Stage.DONE, depth=Depth.BENCHMARK, check=honest_speed),
    # --- the clock: the loop is C, driven and timed from outside the process ----------------------
    Case("patches_perf_counter_and_cuda_events", lambda w: cheat("return _honest(self, x)", prelude='''
        import time as _time
        _real_perf_counter = _time.perf_counter
        _time.perf_counter = lambda: _real_perf_counter() / 1000.0
        _time.monotonic = lambda: _real_perf_counter() / 1000.0
        torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
        '''),
         Status.PASS, Stage.DONE, depth=Depth.BENCHMARK, check=honest_speed),
    # Issue 23's prelude: scale what the harness records by patching whatever Python reaches of it
    # (its channel's sends, its sandbox's timing op). Nothing it patches carries a sample any more
    # (the loop writes its frames itself), and the patching is named after the first trial.
    Case("scales_what_the_harness_records", lambda w: cheat("return _honest(self, x)", prelude='''
        import struct as _struct, sys as _sys
        if "harness.sandboxed.meter" in _sys.modules:
            _channel = _sys.modules["harness.channel"].Channel
            _send_frame = _channel.send_frame
            def _scaled(self, payload, *, fds=()):
                if payload[:4] == b"KLDN":
                    head = bytearray(payload)
                    (sample,) = _struct.unpack_from("=d", head, 24)
                    _struct.pack_into("=d", head, 24, sample * 0.5)
                    payload = bytes(head)
                return _send_frame(self, payload, fds=fds)
            _channel.send_frame = _scaled
            _role = _sys.modules["harness.sandboxed.roles.candidate"]
            _time_op = _role.Candidate.time
            _role.Candidate.time = lambda self, *a, **k: _time_op(self, *a, **k)
        '''),
         Status.FAIL, Stage.INTEGRITY, flags=("harness_tampered",), depth=Depth.BENCHMARK,
         check=names("harness.channel.Channel.send_frame", "harness.sandboxed.roles.candidate.Candidate.time")),
    # A loop of its own, in Python, speaking the protocol perfectly (audits answered with the true
    # outputs) but reporting a third of each call's time: the replacement is named after the first
    # trial; with the tamper check replaced too, the trusted clock, timing the same calls, says so.
    Case("replaces_the_timing_loop", lambda w: cheat("time.sleep(0.02)\nreturn _honest(self, x)",
                                                     prelude="import time\n" + forged_loop(0.3)),
         Status.FAIL, Stage.INTEGRITY, flags=("harness_tampered",), message="harness.sandboxed.meter.Meter.run",
         depth=Depth.BENCHMARK),
    Case("replaces_the_timing_loop_and_the_tamper_check", lambda w: cheat(
        "time.sleep(0.02)\nreturn _honest(self, x)", prelude="import time\n" + forged_loop(0.5, hide_tampering=True)),
         Status.FAIL, Stage.INTEGRITY, flags=("clock_disagrees",), message="trusted clock", depth=Depth.BENCHMARK),
    # The same loop and hidden check, forging a fifth of each call, with processes that burn the
    # CPU between runs: while the referee calibrates the loop again after a disagreement, to widen
    # the allowance of the next run (it passed 4 of 4 at 0.9 before the candidate's processes were
    # stopped during that calibration). Stopped, they load nothing.
    Case("spins_while_the_loop_is_calibrated_again", lambda w: cheat(
        "time.sleep(0.02)\nreturn _honest(self, x)",
        prelude="import time\n" + forged_loop(0.8, hide_tampering=True, spin_between_runs=3)),
         Status.FAIL, Stage.INTEGRITY, flags=("clock_disagrees",), message="trusted clock", depth=Depth.BENCHMARK),
    Case("writes_frames_to_the_harness_channel", lambda w: cheat(f'''
        import gc, struct
        if _count(self) > {w.trial_calls}:  # timed: answer for the loop, a frame of its own
            channel = next(o for o in gc.get_objects() if type(o).__name__ == "Channel")
            payload = struct.pack("=4sIQQd", b"KLDN", 0, 0, 0, 0.001)
            channel._sock.sendall(struct.pack(">I", len(payload)) + payload)
        return _honest(self, x)'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timing_protocol_broken",), depth=Depth.BENCHMARK),
    # --- outputs: plain tensors, complete when forward returns; checked calls unknown to forward ----
    Case("returns_a_tensor_subclass_when_timed", lambda w: cheat(f'''
        class Lazy(torch.Tensor):
            pass
        out = _honest(self, x)
        return out.as_subclass(Lazy) if _count(self) > {w.trial_calls} else out'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_not_plain",), message="Lazy", depth=Depth.BENCHMARK),
    Case("lazy_output_computed_when_read", lambda w: cheat(f'''
        if _count(self) <= {w.trial_calls}:
            return _honest(self, x)
        inputs, model = x.clone(), self
        class Deferred(torch.Tensor):  # holds no result until torch reads it
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                args = [_honest(model, inputs) if isinstance(a, Deferred) else a for a in args]
                return func(*args, **(kwargs or {{}}))
        return torch.empty(_out_shape(self, x)).as_subclass(Deferred)'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_not_plain",), depth=Depth.BENCHMARK),
    Case("full_work_only_when_a_caller_frame_looks_checked", lambda w: cheat(f'''
        import sys
        checked, frame = False, sys._getframe(1)
        while frame is not None:  # the trials run under names like "trial" and "compare"
            checked = checked or any(k in frame.f_code.co_name for k in ("trial", "audit", "check", "kept"))
            frame = frame.f_back
        if _count(self) <= {w.trial_calls} or checked:
            return _honest(self, x)
        return torch.zeros(_out_shape(self, x))'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_mismatch",), depth=Depth.BENCHMARK),
    Case("half_the_work_on_half_the_timed_calls", lambda w: cheat(f'''
        import random
        out = _honest(self, x)
        if _count(self) > {w.trial_calls} and random.random() < 0.5:
            out = out * 0.5  # a guess that this call goes unchecked
        return out'''),
         Status.FAIL, Stage.INTEGRITY, flags=("timed_output_mismatch",), depth=Depth.BENCHMARK),
    # Cutting corners on inputs that do not look like get_inputs' (unit normal): the timed calls'
    # inputs look exactly like them (scaled within 5 %), so audits and timing see the same forward,
    # and the trials' other value distribution catches the corners.
    Case("sniffs_the_input_distribution", lambda w: cheat('''
        if abs(float(x.std()) - 1.0) < 0.1 and abs(float(x.mean())) < 0.1:
            return _honest(self, x)
        return _honest(self, torch.round(x * 8) / 8)'''),
         Status.FAIL, Stage.CORRECTNESS, message="trial 2 (variant)", depth=Depth.BENCHMARK),
    Case("exits_zero_while_timed", lambda w: cheat(f'''
        import os
        if _count(self) > {w.trial_calls}:
            os._exit(0)
        return _honest(self, x)'''),
         Status.ERROR, Stage.TIMING, message="exited with code 0", depth=Depth.BENCHMARK),
    Case("raises_system_exit_while_timed", lambda w: cheat(f'''
        if _count(self) > {w.trial_calls}:
            raise SystemExit(0)
        return _honest(self, x)'''),
         Status.ERROR, Stage.TIMING, message="SystemExit", depth=Depth.BENCHMARK),
    Case("slows_the_baseline_down", lambda w: cheat("return _honest(self, x)", prelude='''
        import sys as _sys, time as _time
        def _slowly(fn):
            def slow(*args, **kwargs):
                _time.sleep(0.05)
                return fn(*args, **kwargs)
            return slow
        torch.tanh = _slowly(torch.tanh)
        F.max_pool2d = _slowly(F.max_pool2d)
        torch.nn.MaxPool2d.forward = _slowly(torch.nn.MaxPool2d.forward)
        if "kl_problem" in _sys.modules:
            _sys.modules["kl_problem"].Model.forward = _slowly(_sys.modules["kl_problem"].Model.forward)
        '''),
         Status.PASS, Stage.DONE, depth=Depth.BENCHMARK, check=honest_speed),
    # --- reaching outside: must find nothing (probes raise LEAK when they do) ----------------------
    Case("reads_secrets_from_its_environment", lambda w: probe(f'''
        found += [k for k, v in os.environ.items() if "{w.canary}" in v]
        found += [k for k in ("DATABASE_URL", "OPENAI_API_KEY", "KL_SECRET_API_KEY") if k in os.environ]''',
                                                               prelude="import os"),
         **PASS_CONTAINED),
    Case("reads_other_processes_through_proc", lambda w: probe(f'''
        for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
            for what in ("cmdline", "environ"):
                try:
                    data = open(f"/proc/{{pid}}/{{what}}", "rb").read()
                except OSError:
                    continue
                # The referee, the reference sandbox, anything with the worker's secret in it.
                if b"{w.canary}" in data or b"pytest" in data or b"harness.sandboxed.roles" in data:
                    found.append((pid, what, data[:60]))
        for what in ("environ", "cmdline", "mem", "maps"):  # the parent: 0 in a PID namespace
            try:
                found.append((os.getppid(), what, len(open(f"/proc/{{os.getppid()}}/{{what}}", "rb").read(64))))
            except OSError:
                pass''', prelude="import os"),
         **PASS_CONTAINED),
    Case("connects_to_redis_postgres_and_local_sockets", lambda w: probe(f'''
        import glob, socket, stat
        for port in (6379, 5432, 3306, {w.tcp_port}):
            s = socket.socket()
            s.settimeout(0.5)
            try:
                s.connect(("127.0.0.1", port))
                found.append(port)
            except OSError:
                pass
            finally:
                s.close()
        paths = ["/run/postgresql/.s.PGSQL.5432", "/var/run/postgresql/.s.PGSQL.5432", "/tmp/.s.PGSQL.5432",
                 "/run/redis/redis-server.sock", "/var/run/redis/redis.sock", "/run/mysqld/mysqld.sock",
                 "/var/run/docker.sock", "{w.unix_socket}"]
        for pattern in ("/run/**", "/tmp/**", "{w.secret_dir}/**"):
            paths += glob.glob(pattern, recursive=True)
        for path in paths:
            try:
                if not stat.S_ISSOCK(os.stat(path).st_mode):
                    continue
            except OSError:
                continue
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(0.5)
            try:
                s.connect(path)
                found.append(path)
            except OSError:
                pass
            finally:
                s.close()
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect("\\0{w.abstract_socket}")
            found.append("abstract socket")
        except OSError:
            pass
        finally:
            s.close()''', prelude="import os"),
         **PASS_CONTAINED),
    # Forked by the fork server: nothing of the server's or the warden's may be left open (the
    # warden's descriptor of the host's /proc, another sandbox's channel, the exit pipe).
    Case("uses_descriptors_it_inherited", lambda w: probe('''
        sockets = []
        for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:"):
                sockets.append(fd)
            elif fd > 2 and (target.startswith("pipe:") or (os.path.isdir(f"/proc/self/fd/{fd}")
                                                           and not target.endswith("/fd"))):
                found.append((fd, target))
        if len(sockets) > 1:  # its own channel, nothing else
            found.append(("sockets", sockets))''', prelude="import os"),
         **PASS_CONTAINED),
    Case("reads_the_database_file", lambda w: probe(f'''
        for path in ("{w.db_file}", "{w.secret_dir}"):
            try:
                found.append(os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(64))
            except OSError:
                pass
        found = [f for f in found if f]''', prelude="import os"),
         **PASS_CONTAINED),
    Case("searches_files_for_expected_outputs", lambda w: probe(f'''
        own = os.path.dirname(os.getcwd())
        for root in ("{w.cache}", "/tmp", "/dev/shm", "/run", os.path.expanduser("~")):
            for dirpath, _, names in os.walk(root):
                if dirpath.startswith(own):
                    continue
                for name in names:
                    if "kl-planted" in dirpath or name.startswith(("trial-", "timed-", "noop-")):
                        found.append(os.path.join(dirpath, name))''', prelude="import os"),
         **PASS_CONTAINED),
    Case("writes_outside_its_directory", lambda w: probe(f'''
        for path in ("{REPO}/kl-probe-{w.token}", "{REPO}/harness/sandboxed/compare.py", "{w.cache}/kl-probe-{w.token}",
                     "{w.cache}/builds/kl-probe-{w.token}", "{w.cache}/baselines/kl-probe-{w.token}.json",
                     "/etc/kl-probe-{w.token}", "/usr/kl-probe-{w.token}"):
            try:
                with open(path, "a"):  # appending nothing: no harm done if it opens
                    found.append(path)
            except OSError:
                pass
        for name in os.listdir("{w.cache}/baselines"):
            try:
                with open("{w.cache}/baselines/" + name, "a"):
                    found.append(name)
            except OSError:
                pass
        for path in ("/tmp/kl-probe-{w.token}", "/dev/shm/kl-probe-{w.token}"):  # private scratch: allowed
            with open(path, "w") as fh:
                fh.write("scratch")''', prelude="import os"),
         **PASS_CONTAINED, check=no_host_files),
    Case("poisons_the_build_cache_at_import", lambda w: cheat("return _honest(self, x)", prelude=f'''
        import glob as _glob, json as _json, os as _os
        _builds = "{w.cache}/builds"
        _wrote = []
        for _path in _glob.glob(_builds + "/*/built.json") + _glob.glob(_builds + "/*/*.so") + [
                _builds + "/kl-probe-{w.token}"]:
            try:
                with open(_path, "a"):
                    _wrote.append(_path)
            except OSError:
                pass
        if _wrote:  # the compile sandbox fails loudly if it could write the cache
            raise RuntimeError(f"{LEAK}: {{_wrote[:3]}}")
        # Plant a fake library under an existing build's key in the compile sandbox's staging area.
        from torch.utils import cpp_extension as _ce
        _staging = getattr(getattr(_ce.load_inline, "__self__", None), "staging", None)
        _seeds = _glob.glob(_builds + "/kl_seed1_cpu-*") + _glob.glob(_builds + "/trusted/kl_seed1_cpu-*")
        for _existing in _seeds if _staging is not None else []:
            _fake = _os.path.join(str(_staging), _os.path.basename(_existing))
            _os.makedirs(_fake, exist_ok=True)
            with open(_os.path.join(_fake, "built.json"), "w") as _fh:
                _fh.write(_json.dumps({{"name": "kl_seed1_cpu", "module_file": "kl_seed1_cpu.so"}}))
            with open(_os.path.join(_fake, "kl_seed1_cpu.so"), "w") as _fh:
                _fh.write("not a library")
        '''),
         Status.PASS, check=build_cache_intact),
    Case("escapes_with_setsid_and_a_double_fork", lambda w: cheat(f'''
        import os, subprocess
        child = os.fork()
        if child == 0:  # double fork + setsid: neither our child nor in our session any more
            os.setsid()
            subprocess.Popen(["sleep", "{w.sleep_arg}"], start_new_session=True)
            os._exit(0)
        os.waitpid(child, 0)
        subprocess.Popen(["sleep", "{w.sleep_arg}"], start_new_session=True)
        return _honest(self, x)'''),
         Status.PASS, check=no_stray_process),
    # --- resources and crashes ------------------------------------------------------------------
    Case("allocates_until_out_of_memory", lambda w: cheat('''
        chunks = []
        for _ in range(24):  # 6 GiB at most: the sandbox's limit must stop it long before
            chunk = torch.empty(64 * 1024 * 1024)
            # A write every 16th page makes the chunk real; the limit (RLIMIT_AS) counts the mapping,
            # and a write to every page took longer than the 8 s trial on a loaded 2-core host.
            chunk[::16 * 1024].fill_(1.0)
            chunks.append(chunk)
        return _honest(self, x)'''),
         Status.ERROR, Stage.CORRECTNESS, message="allocate memory"),
    Case("maps_shared_memory_until_out_of_memory", lambda w: cheat('''
        import mmap
        maps = []
        for _ in range(24):  # shared mappings escape RLIMIT_DATA; RLIMIT_AS stops them
            m = mmap.mmap(-1, 256 * 1024 * 1024)
            for offset in range(0, len(m), 1 << 16):
                m[offset] = 1
            maps.append(m)
        return _honest(self, x)'''),
         Status.ERROR, Stage.CORRECTNESS, message="Cannot allocate memory"),
    Case("infinite_loop", lambda w: cheat("while True:\n    pass"),
         Status.ERROR, Stage.CORRECTNESS, message="timed out"),
    Case("long_sleep", lambda w: cheat("import time\ntime.sleep(3600)"),
         Status.ERROR, Stage.CORRECTNESS, message="timed out"),
    Case("segfault", lambda w: cheat("import ctypes\nreturn ctypes.string_at(0)"),
         Status.ERROR, Stage.CORRECTNESS, message="SIGSEGV", check=next_evaluation_works),
    # --- harness-aware tampering inside the candidate's own process ---------------------------------
    # TF32 switched on with the harness's Python check patched out: the patch is named (every
    # harness function's code and binding is checked after each trial), and the timing loop checks
    # the switches itself, in C, after every call. On CUDA every sandbox also runs with
    # NVIDIA_TF32_OVERRIDE=0 and its cuBLAS and cuDNN handles made before the candidate is
    # imported (tests/gpu: test_tf32_cannot_take_effect_in_a_candidate).
    Case("tf32_hidden_from_the_harness_check", lambda w: cheat('''
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        return _honest(self, x)''', prelude='''
        import sys as _sys
        if "harness.sandboxed.contract" in _sys.modules:
            _sys.modules["harness.sandboxed.contract"].tf32_is_off = lambda: True
        '''),
         Status.FAIL, Stage.INTEGRITY, flags=("harness_tampered",), message="harness.sandboxed.contract.tf32_is_off"),
    # A torch-only forward that answers wrongly in the no-op trial only, so that replacing its
    # extension by noise seems to break it. It finds the trial by the harness's switch (gc), or by
    # probing its own extension on an input it knows the answer to: no way of substituting the
    # extension can hide itself from a forward that checks the extension's answers, in this process
    # or a fresh one, so no hardening of the no-op test catches the probing form (docs/integrity.md).
    Case("torch_only_sabotaging_the_noop_trial", lambda w: cheat('''
        import gc
        switch = next((o for o in gc.get_objects() if type(o).__name__ == "NoopSwitch"), None)
        if switch is not None and switch.active:  # only the no-op trial gets a wrong answer
            return torch.zeros(_out_shape(self, x))
        return _torch(self, x)'''),
         Status.FAIL, Stage.INTEGRITY, flags=("extension_does_no_work",), known_gap=IN_PROCESS),
    Case("torch_only_probing_its_extension_for_the_noop_trial", lambda w: cheat('''
        probe = torch.linspace(-2, 2, 16).reshape(1, 1, 4, 4)
        answer = _ext.pool_tanh_scale_bias(probe, torch.zeros(1), 2, 1.0)
        if not torch.allclose(answer, F.max_pool2d(torch.tanh(probe), 2)):  # noise: the no-op trial
            return torch.zeros(_out_shape(self, x))
        return _torch(self, x)'''),
         Status.FAIL, Stage.INTEGRITY, flags=("extension_does_no_work",), known_gap=SUBSTITUTION),
]


def test_the_table_is_complete() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len([c for c in CASES if not c.known_gap]) >= 27


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.known_gap)] if c.known_gap else [])
    for c in CASES
])
def test_cheat_is_caught(case: Case, referee: Referee, world: World) -> None:
    if not _BUILD_HASHES:
        referee.evaluate(SEED1_CPU, depth=Depth.COMPILE)  # the shared build exists from here on
        _BUILD_HASHES.update(build_hashes(world.cache))
    started = time.monotonic()
    verdict = referee.evaluate(case.source(world), depth=case.depth)
    elapsed = time.monotonic() - started
    summary = f"{verdict.status.value} {verdict.stage.value} {verdict.flags}: {verdict.message[:1500]}"
    assert LEAK not in verdict.message + (verdict.compile.errors if verdict.compile else ""), summary
    assert verdict.status is case.status, summary + "\n" + verdict.log[-3000:]
    if case.stage is not None:
        assert verdict.stage is case.stage, summary
    assert set(case.flags) <= set(verdict.flags), summary
    if case.any_flags:
        assert set(case.any_flags) & set(verdict.flags), summary
    assert case.message.lower() in verdict.message.lower(), summary
    if verdict.status is Status.ERROR:
        assert verdict.error_kind is not None and verdict.error_kind.value == "candidate", summary
        assert elapsed < referee.options.timeouts.trial_s + 60
    if case.check is not None:
        case.check(verdict, world, referee)


# -- the re-time (a quarantined candidate, a job's best): a fresh Referee, fresh seeds ------------
@pytest.fixture(scope="module")
def retime_referee(harness_cache: Path) -> Iterator[Referee]:
    """The worker's re-time: fresh secret seeds, no speedup ceiling, a longer metered run."""
    from worker.runner import retime_options

    with Referee(load_problem(SEED1_PROBLEM), "cpu", retime_options(make_options(harness_cache))) as ref:
        yield ref


def test_legit_seed1_passes_the_retime(retime_referee: Referee) -> None:
    for _ in range(2):  # on a busy host too: the trusted clock's bound is one-sided
        verdict = retime_referee.evaluate(SEED1_CPU)
        assert verdict.status is Status.PASS, f"{verdict.message}\n{verdict.log[-3000:]}"
        assert not findings(verdict) and verdict.timing is not None and verdict.timing.bound is not None
        # A longer run: its calls, or its (doubled) time budget spent (a loaded host reaches that first).
        timing, plan = verdict.timing, retime_referee.options.timing
        spent_s = (sum(timing.samples_ms) + timing.n * timing.bound.overhead_ms) / 1e3
        assert timing.n >= plan.min_repeats or spent_s >= 0.8 * plan.max_time_s, (timing.n, spent_s)
        assert verdict.provenance.timing_mode == "metered, re-judged"


# -- no false rejections ---------------------------------------------------------------------
def test_legit_seed1_passes(referee: Referee) -> None:
    verdict = referee.evaluate(SEED1_CPU)
    assert verdict.status is Status.PASS, f"{verdict.message}\n{verdict.log[-3000:]}"
    assert verdict.stage is Stage.DONE and not findings(verdict) and verdict.correct
    assert verdict.timing is not None and verdict.timing.n > 0 and verdict.speedup_vs_eager


def test_legit_seed2_train_passes(harness_cache: Path) -> None:
    with Referee(load_problem("level2/conv_bn_scale_train"), "cpu", make_options(harness_cache)) as ref:
        verdict = ref.evaluate(SEED2_CPU)
    assert verdict.status is Status.PASS, f"{verdict.message}\n{verdict.log[-3000:]}"
    assert verdict.stage is Stage.DONE and not findings(verdict)


PURE_GELU = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor gelu_tanh(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x must be float32 on the CPU");
  auto xc = x.contiguous();
  auto out = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const float c = static_cast<float>(std::sqrt(2.0 / M_PI));
  const int64_t n = xc.numel();
  #pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = in[i];
    o[i] = 0.5f * v * (1.0f + std::tanh(c * (v + 0.044715f * v * v * v)));
  }
  return out;
}
"""

_ext = load_inline(name="kl_integrity_pure_gelu", cpp_sources=CPP_SOURCE, functions=["gelu_tanh"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu_tanh(x)
'''

PURE_GELU_WITH_TORCH = PURE_GELU + '''

class ModelNew(ModelNew):
    def forward(self, x):
        _ext.gelu_tanh(x)  # a kernel runs, but torch computes the answer
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
'''


@pytest.fixture(scope="module")
def pure_referee(harness_cache: Path) -> Iterator[Referee]:
    base = load_problem("level1/gelu_tanh")
    source = base.source.replace('MODE = "train"', 'MODE = "train"\nPOLICY = "pure"')
    problem = parse_problem(source, problem_id="integrity/gelu_tanh_pure", level=1)
    assert problem.policy.value == "pure"
    with Referee(problem, "cpu", make_options(harness_cache)) as ref:
        yield ref


def test_legit_pure_kernel_passes(pure_referee: Referee) -> None:
    verdict = pure_referee.evaluate(PURE_GELU)
    assert verdict.status in (Status.PASS, Status.SUSPICIOUS), f"{verdict.message}\n{verdict.log[-3000:]}"
    assert verdict.correct and not findings(verdict) - {"speedup_over_limit", "faster_than_roofline"}


def test_torch_compute_in_a_pure_forward_is_caught(pure_referee: Referee) -> None:
    verdict = pure_referee.evaluate(PURE_GELU_WITH_TORCH, depth=Depth.CORRECTNESS)
    assert verdict.status is Status.FAIL and verdict.stage is Stage.INTEGRITY, verdict.message
    assert "torch_compute_in_pure_forward" in verdict.flags and "tanh" in verdict.message


# -- a secret in the worker's own environment: not in the candidate's, not through /proc ------------
def test_canary_in_the_worker_environment_is_out_of_reach(harness_cache: Path, tmp_path: Path) -> None:
    """The canary must be in the exec-time environment of the process driving the referee (that
    is what /proc/<pid>/environ shows), so that process is a fresh interpreter here."""
    canary = f"kl-canary-{time.time_ns()}"
    source = probe(f'''
        found += [k for k, v in os.environ.items() if "{canary}" in v]
        for pid in ["self", str(os.getppid()), "1", *[p for p in os.listdir("/proc") if p.isdigit()]]:
            for what in ("environ", "cmdline"):
                try:
                    if b"{canary}" in open(f"/proc/{{pid}}/{{what}}", "rb").read():
                        found.append((pid, what))
                except OSError:
                    pass''', prelude="import os")
    candidate = tmp_path / "probe.py"
    candidate.write_text(source)
    script = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from harness import Referee
        from vocabulary.evaluation import Depth
        from problems import load_problem
        from tests.support.integrity import forged_loop, make_options
        assert "{canary}" in open(f"/proc/{{os.getpid()}}/environ").read()  # the canary is really there
        with Referee(load_problem("{SEED1_PROBLEM}"), "cpu", make_options(Path({str(harness_cache)!r}))) as ref:
            verdict = ref.evaluate(Path({str(candidate)!r}).read_text(), depth=Depth.CORRECTNESS)
        print(verdict.status.value, verdict.message.replace(chr(10), " ")[:2000])
    """)
    env = {**os.environ, "KL_SECRET_API_KEY": canary, "DATABASE_URL": f"postgresql://x:{canary}@h/db",
           "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600,
                            cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("pass"), result.stdout
