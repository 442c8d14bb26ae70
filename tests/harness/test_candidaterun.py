"""The candidate run's steps against a scripted sandbox and comparer (no process, no compile): what
each reply, honest or not, makes of the verdict. A sandbox that sends garbage gets the verdict the
referee has always given it (its fault, at the step it was in). The metered loop is scripted too
(`FakeLoop`: real frames, real sealed memfds, a sleep for the kernel)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import harness.meter.noise
from harness.assembly import VerdictFacts
from harness.buildcache.records import BuildAnswer, BuildRecord
from harness.candidaterun import MALFORMED_TIMING, CandidateSteps, RunContext
from harness.channel import ChannelTimeout, Frame
from harness.draft import Draft
from harness.meter.clock import Calibration
from harness.meter.drive import CallPlan, drive
from harness.options import HarnessOptions, TimingOptions
from harness.progress import StageReporter
from harness.protocol import Op
from harness.protocol.build import Delegation
from harness.protocol.reference import Compared, CompareItem
from harness.sandboxpool import StartedSandbox
from harness.sandboxspec import SandboxReport
from harness.seeds import plan_trials
from problems import load_problem
from vocabulary.builds import BuildPhase, CompileResult, KernelInfo
from vocabulary.causes import KernelError
from vocabulary.evaluation import Depth, Target
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from vocabulary.wire import JsonObject

PROBLEM = load_problem("level2/conv_tanh_scale_bias_maxpool")
TRIALS = tuple(plan_trials(3, trials=2, input_variants=False, extra_shapes=[]))
OUTPUT: JsonObject = {"kind": "file", "name": "x.bin", "tensors": [], "single": True}
#: What the no-op substitution trial of an extension that does real work returns: noise.
NOISE: JsonObject = {"kind": "file", "name": "noop-0.bin", "tensors": [], "single": True}
Reply = Callable[[JsonObject], JsonObject]


def honest(message: JsonObject) -> JsonObject:
    """What an honest candidate sandbox answers."""
    op = message.get("op")
    if op == Op.LOAD:
        return {"ok": True, "extensions": ["kl_ext"]}
    if op == Op.TRIAL:
        return {"output": NOISE if message.get("noop") else OUTPUT, "flags": []}
    if op == Op.PROFILE:
        return {"kernels": [{"name": "k", "calls": 1, "ms_per_forward": 0.5}]}
    if op == Op.TIME:
        return {"metering": True}
    raise AssertionError(message)


_GO = struct.Struct("=4sIQQQQII")
#: The scripted kernel's time.
KERNEL_S = 0.001


class FakeLoop:
    """The candidate sandbox's metered loop, scripted: each GO frame answered by a DONE frame after
    ``KERNEL_S`` (its sample: that time, times ``scale``), an audit by a sealed memfd of 4 bytes."""

    def __init__(self, scale: float = 1.0, end: JsonObject | None = None) -> None:
        self.scale = scale
        self.end = end if end is not None else {"calls": 0, "flags": [], "tampered": []}
        self.go: tuple[Any, ...] = ()
        self.last_call = -1

    def send_frame(self, payload: bytes, *, fds: tuple[int, ...] = ()) -> None:
        self.go = _GO.unpack(payload)

    def recv_frame(self, timeout: float | None = None) -> Frame:
        _, flags, call, _, _, nonce, _, _ = self.go
        if flags & 1:
            fd = os.memfd_create("audit", os.MFD_ALLOW_SEALING)
            os.write(fd, b"\0" * 4)
            import fcntl
            fcntl.fcntl(fd, 1033, 0x2 | 0x4 | 0x8)
            description = json.dumps({"single": True, "tensors": [{"dtype": "float32", "shape": [1],
                                                                   "device": "cpu"}]}).encode()
            return Frame(struct.pack("=4sIQQ", b"KLAU", 0, self.last_call, 4) + description, (fd,))
        started = time.perf_counter()
        time.sleep(KERNEL_S)
        sample = (time.perf_counter() - started) * 1e3 * self.scale
        self.last_call = call
        return Frame(struct.pack("=4sIQQd", b"KLDN", 0, call, nonce, sample))

    def recv(self) -> JsonObject:
        return self.end


class FakeProcess:
    def __init__(self, answer: Reply, loop: FakeLoop | None = None) -> None:
        self.answer = answer
        self.channel = loop or FakeLoop()
        self.sandbox_report = SandboxReport(received=True, namespaces=("user", "mount"))
        self.killed = False
        self.asked: list[JsonObject] = []
        self.timeouts: list[float] = []

    def request(self, message: Any, *, timeout: float) -> JsonObject:
        raw = message.to_dict()
        self.asked.append(raw)
        self.timeouts.append(timeout)
        return self.answer(raw)

    def recv(self, *, timeout: float) -> JsonObject:
        return self.channel.recv()

    def log_tail(self, limit: int) -> str:
        return "the sandbox's log"

    def describe_exit(self, wait_s: float = 2.0) -> str:
        return "killed by SIGSEGV"

    def kill(self) -> None:
        self.killed = True

    @contextlib.contextmanager
    def paused(self) -> Iterator[bool]:
        yield True

    def close(self) -> None:
        self.killed = True

    def __enter__(self) -> FakeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class FakeReference:
    """The comparer: every output passes but noise (``passes`` says otherwise); the loop's own cost
    is the driver's (the scripted loop adds none): up to a few tenths of a millisecond here."""

    target = Target.CPU
    transport = "file"
    timing_sets = (0, 1)
    roofline_trusted = True

    def __init__(self, passes: Callable[[CompareItem], bool] = lambda item: item.output != NOISE) -> None:
        self.passes = passes

    def compare(self, items: tuple[CompareItem, ...], directory: Path, fds: tuple[int, ...] = ()
                ) -> tuple[Compared, ...]:
        return tuple(Compared(passed=self.passes(i), max_abs_err=0.0, mean_abs_err=0.0, mismatch_frac=0.0,
                              message="") for i in items)

    def calibration(self, *, again: bool = False) -> Calibration:
        # The scripted loop does nothing around a call: its gaps have no floor to speak of.
        return Calibration(gaps=(0.0,), overhead_ms=0.1, spread_ms=0.05, calls=10)


FACTS = VerdictFacts(target=Target.CPU, problem_sha256="ab" * 32, mode="train", policy="mixed", atol=None, rtol=None,
                     trials=len(TRIALS), seeds="s", rejudge=False, transport="file", reference=None,
                     python="3.11", host="h", pid=1, output_limit=1000)
#: Few calls: each sleeps a millisecond.
QUICK = TimingOptions(warmup_ms=0, min_warmup_calls=1, min_repeats=5, max_repeats=5, audits=1)


@pytest.fixture(autouse=True)
def quiet_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scripted figures are judged as on an idle host (the CI host's load is not theirs)."""
    monkeypatch.setattr(harness.meter.noise, "_getloadavg", lambda: (0.0, 0.0, 0.0))


@pytest.fixture
def where(tmp_path: Path, harness_cache: Path) -> tuple[Path, Path]:
    """A run directory of the test's own, and the session's cache (the loop's build is shared)."""
    return tmp_path, harness_cache


def run(where: tuple[Path, Path], answer: Reply = honest, *, depth: Depth = Depth.BENCHMARK,
        reference: FakeReference | None = None, loop: FakeLoop | None = None, sandbox: Reply | None = None,
        build: Callable[[JsonObject | None], BuildAnswer] | None = None,
        compiled: CompileResult | None = None) -> tuple[Verdict, FakeProcess]:
    """``sandbox``: answers instead of ``answer``; ``loop``: the metered loop; ``build``: the trusted
    builder of lazy builds; ``compiled``: the compile sandbox's result."""
    tmp_path, cache = where
    process = FakeProcess(sandbox or answer, loop)
    (tmp_path / "run").mkdir(exist_ok=True)
    options = HarnessOptions(cache_dir=cache, timing=QUICK)
    context = RunContext(problem=PROBLEM, options=options, trials=TRIALS,
                         secret=3, reference=reference or FakeReference(),  # type: ignore[arg-type]
                         settle=lambda sandbox: None, facts=lambda: FACTS, build=build)
    started = StartedSandbox(process=process, run_dir=tmp_path, ready=True)  # type: ignore[arg-type]
    verdict = CandidateSteps(context, started, "class ModelNew: ...", StageReporter(None)).run(
        Draft(depth=depth, compile=compiled))
    return verdict, process


def but(op: Op, reply: JsonObject | Callable[[JsonObject], JsonObject]) -> Reply:
    """The honest sandbox, except for its answer to ``op``."""
    def answer(message: JsonObject) -> JsonObject:
        if message.get("op") != op:
            return honest(message)
        return reply(message) if callable(reply) else reply
    return answer


def test_an_honest_candidate_passes_each_depth(where: tuple[Path, Path]) -> None:
    checked, _ = run(where, depth=Depth.CORRECTNESS)
    assert (checked.status, checked.stage, checked.message) == (Status.PASS, Stage.CORRECTNESS, "correct (not timed)")
    assert len(checked.trials) == 2 and checked.log == "" and checked.provenance.sandbox == ("user", "mount")
    timed, process = run(where)
    assert (timed.status, timed.stage, timed.message) == (Status.PASS, Stage.DONE, "correct and timed")
    assert timed.timing is not None and timed.timing.n >= 5 and not timed.flags
    assert timed.timing.bound is not None and timed.timing.bound.audits >= 2  # one per input set at least
    assert [m["op"] for m in process.asked] == ["load", "trial", "trial", "trial", "time"]  # the last: no-op
    profiled, _ = run(where, depth=Depth.PROFILE)
    assert profiled.status is Status.PASS and profiled.profile[0].ms == 0.5


def test_a_run_that_stops_at_its_first_chance_is_audited_as_often_as_asked() -> None:
    """Most runs stop as soon as their noise allows (``min_repeats`` calls): they get the audits
    asked for, not the share of them that a run of ``max_repeats`` calls would have had (a cheat on
    half the calls slipped through such runs one time in eight); a run that goes on is audited a
    few times more, not in proportion (its audited outputs are held until it ends)."""
    stops_early = CallPlan(warmup_ms=0, min_warmup_calls=1, min_repeats=20, max_repeats=1000,
                           target_rel_stderr=1.0, max_time_s=60.0, sets=1, audits=5)
    runs = [drive(FakeLoop(), stops_early, timeout_s=30) for _ in range(10)]
    goes_on = drive(FakeLoop(), dataclasses.replace(stops_early, max_repeats=400, target_rel_stderr=0.0), timeout_s=30)
    try:
        assert [len(r.timed) for r in runs] == [20] * 10 and len(goes_on.timed) == 400
        assert sum(len(r.audits) for r in runs) >= 25  # 50 expected (5 in each); a rate of 5 in 1,000 gave 1
        assert len(goes_on.audits) < 40  # 5 · (1 + ln 20) = 20 expected
    finally:
        for r in (*runs, goes_on):
            r.close()


@pytest.mark.parametrize("end", [{"calls": "5"}, {"flags": "none"}])
def test_a_malformed_end_of_the_timing_loop_is_the_candidates_fault(where: tuple[Path, Path], end: JsonObject) -> None:
    verdict, _ = run(where, loop=FakeLoop(end=end))
    assert (verdict.status, verdict.stage, verdict.error_kind) == (Status.ERROR, Stage.TIMING, ErrorKind.CANDIDATE)
    assert verdict.message == MALFORMED_TIMING and verdict.log == "the sandbox's log"


@pytest.mark.parametrize(("op", "reply", "stage"), [
    (Op.LOAD, {"ok": True, "extensions": "kl_ext"}, Stage.LOAD),
    (Op.TRIAL, {"output": OUTPUT, "flags": "none"}, Stage.CORRECTNESS),
    (Op.TRIAL, {"output": OUTPUT, "ops": {"addmm": 1}}, Stage.CORRECTNESS),
    (Op.PROFILE, {"kernels": [{"calls": 1}]}, Stage.TIMING),
])
def test_any_other_malformed_reply_is_the_candidates_fault_at_its_step(where: tuple[Path, Path], op: Op,
                                                                       reply: JsonObject, stage: Stage) -> None:
    verdict, _ = run(where, but(op, reply), depth=Depth.PROFILE if op is Op.PROFILE else Depth.BENCHMARK)
    assert (verdict.status, verdict.stage, verdict.error_kind) == (Status.ERROR, stage, ErrorKind.CANDIDATE)
    assert "malformed reply" in verdict.message


def test_a_forward_that_raises_keeps_the_trials_before_it(where: tuple[Path, Path]) -> None:
    def second_raises(message: JsonObject) -> JsonObject:
        return {"error": "ValueError: no"} if message.get("index") == 1 else honest(message)

    verdict, _ = run(where, but(Op.TRIAL, second_raises))
    assert (verdict.status, verdict.stage) == (Status.ERROR, Stage.CORRECTNESS)
    assert verdict.message == "forward raised in trial 1:\nValueError: no"
    assert [t.seed_index for t in verdict.trials] == [0] and verdict.flags == ()


def test_a_sandbox_that_times_out_is_killed_and_keeps_no_flags(where: tuple[Path, Path]) -> None:
    def hangs(message: JsonObject) -> JsonObject:
        raise ChannelTimeout("no reply in time")

    verdict, process = run(where, but(Op.TRIAL, hangs))
    assert (verdict.status, verdict.stage, verdict.message) == (Status.ERROR, Stage.CORRECTNESS, "trial 0 timed out")
    assert verdict.trials == () and process.killed
    timed, _ = run(where, but(Op.TIME, hangs))
    assert timed.stage is Stage.TIMING and timed.message == "timing timed out" and len(timed.trials) == 2


def test_integrity_flags_fail_the_candidate(where: tuple[Path, Path]) -> None:
    none_loaded, _ = run(where, but(Op.LOAD, {"ok": True, "extensions": []}))
    assert (none_loaded.status, none_loaded.stage) == (Status.FAIL, Stage.INTEGRITY)
    assert none_loaded.flags == ("no_custom_kernel",)
    no_work, _ = run(where, reference=FakeReference(passes=lambda item: True))  # the no-op output is right
    assert (no_work.status, no_work.stage, no_work.flags) == (Status.FAIL, Stage.INTEGRITY, ("extension_does_no_work",))
    assert len(no_work.trials) == 2 and no_work.log == "the sandbox's log"
    mismatch, _ = run(where, reference=FakeReference(passes=lambda item: item.call is None and item.output != NOISE))
    assert (mismatch.status, mismatch.stage) == (Status.FAIL, Stage.INTEGRITY)
    assert mismatch.flags == ("timed_output_mismatch",) and mismatch.timing is not None
    for scale in (1e6, 0.3):  # more than the call took, and a third of it
        forged, _ = run(where, loop=FakeLoop(scale=scale))
        assert forged.flags == ("clock_disagrees",) and "the timing was tampered with" in forged.message
    tampered, _ = run(where, loop=FakeLoop(end={"calls": 5, "tampered": ["harness.sandboxed.meter.Meter.run"]}))
    assert tampered.flags == ("harness_tampered",)
    assert "changed the referee's code" in tampered.message and "harness.sandboxed.meter.Meter.run" in tampered.message


def test_a_load_failure_says_what_failed(where: tuple[Path, Path]) -> None:
    verdict, _ = run(where, but(Op.LOAD, {"ok": False, "message": "loading the candidate failed",
                                             "errors": "AttributeError: ModelNew"}))
    assert (verdict.status, verdict.stage, verdict.error_kind) == (Status.ERROR, Stage.LOAD, ErrorKind.CANDIDATE)
    assert verdict.message == "loading the candidate failed:\nAttributeError: ModelNew"


# -- lazy builds: a sandbox that asks for a build while it runs ------------------------------------
KEY = "ab" * 12


class LazySandbox:
    """The honest sandbox, except that its first trial first asks for a build (a build on the first
    forward), then answers as the candidate would: carried on (``catches``) or failed."""

    def __init__(self, *, catches: bool = True, refusal: str | None = None) -> None:
        self.catches = catches
        self.refusal = refusal
        self.trial: JsonObject | None = None
        self.answer: JsonObject | None = None

    def __call__(self, message: JsonObject) -> JsonObject:
        if message.get("op") == Op.TRIAL and self.trial is None:
            self.trial = message
            request = None if self.refusal else {"name": "kl_lazy", "cpp_sources": ["x"], "cuda_sources": [],
                                                 "functions": ["f"], "kwargs": {}}
            return Delegation(request=request, name="kl_lazy", phase=BuildPhase.FORWARD,
                              refusal=self.refusal).to_dict()
        if "op" not in message:  # the trusted side's answer to the build
            self.answer = message
            assert self.trial is not None
            if message["ok"] or self.catches:
                return honest(self.trial)
            return {"error": "BuildError: error building extension 'kl_lazy'"}
        return honest(message)


def builder(ok: bool, seconds: float = 0.2) -> Callable[[JsonObject | None], BuildAnswer]:
    def build(request: JsonObject | None) -> BuildAnswer:
        time.sleep(seconds)
        if not ok:
            return BuildAnswer(ok=False, log="main.cpp:3:5: error: 'y' was not declared in this scope\n  3 | y;")
        return BuildAnswer(ok=True, key=KEY, record=BuildRecord(name="kl_lazy", key=KEY, cached=False, seconds=seconds,
                                                                 kernels=(KernelInfo(kernel="k"),)))
    return build


def test_a_build_on_the_first_forward_is_built_for_the_sandbox_and_counted_as_compile_time(
        where: tuple[Path, Path]) -> None:
    sandbox = LazySandbox()
    verdict, process = run(where, but(Op.LOAD, {"ok": True, "extensions": []}), sandbox=sandbox,
                           build=builder(ok=True, seconds=0.3), compiled=CompileResult(ok=True, seconds=1.0))
    assert (verdict.status, verdict.message) == (Status.PASS, "correct and timed"), verdict.message
    assert sandbox.answer is not None and sandbox.answer["ok"] and sandbox.answer["key"] == KEY
    assert (where[0] / "builds" / f"kl_lazy-{KEY}").is_dir()  # handed to the sandbox, in its own builds
    compiled = verdict.compile
    assert compiled is not None and compiled.seconds >= 1.3 and compiled.kernels == (KernelInfo(kernel="k"),)
    (ext,) = compiled.extensions
    assert (ext.name, ext.lazy, ext.via) == ("kl_lazy", BuildPhase.FORWARD, "builder")
    # The build's time is not the trial's: the wait after it gets the trial's whole limit again.
    trial_s = HarnessOptions().timeouts.trial_s
    assert process.timeouts[2] > trial_s - 0.2 and not verdict.flags  # the lazy extension counts as loaded


def test_a_lazy_build_that_fails_is_named_first_whether_caught_or_not(where: tuple[Path, Path]) -> None:
    caught, _ = run(where, sandbox=LazySandbox(catches=True), build=builder(ok=False),
                    compiled=CompileResult(ok=True, seconds=1.0))
    assert caught.status is Status.PASS and caught.message.splitlines()[0] == (
        "extension 'kl_lazy' failed to build in forward and the candidate caught the error (falling back without "
        "it): main.cpp:3:5: error: 'y' was not declared in this scope")
    assert caught.message.splitlines()[1] == "correct and timed"
    assert caught.log.startswith("extension 'kl_lazy' (in forward), first compiler errors:\nmain.cpp:3:5")
    assert caught.compile is not None and caught.compile.extensions == ()
    uncaught, _ = run(where, sandbox=LazySandbox(catches=False), build=builder(ok=False),
                      compiled=CompileResult(ok=True, seconds=1.0))
    assert (uncaught.status, uncaught.stage, uncaught.error_kind) == (Status.ERROR, Stage.COMPILE, ErrorKind.CANDIDATE)
    assert uncaught.message == "extension 'kl_lazy' failed to build (built lazily, in forward)"
    assert uncaught.compile is not None and not uncaught.compile.ok
    assert "'y' was not declared" in uncaught.compile.errors
    assert not uncaught.compile.swallowed and uncaught.log.startswith("main.cpp:3:5")


def test_a_lazy_build_the_builder_refuses_is_never_built_and_says_to_build_it_at_import(
        where: tuple[Path, Path]) -> None:
    sandbox = LazySandbox(catches=False, refusal="flag '-I/opt/x'")
    built: list[JsonObject | None] = []

    def build(request: JsonObject | None) -> BuildAnswer:
        built.append(request)
        return builder(ok=True)(request)

    verdict, _ = run(where, sandbox=sandbox, build=build, compiled=CompileResult(ok=True, seconds=1.0))
    assert built == [] and sandbox.answer is not None and not sandbox.answer["ok"]
    assert (verdict.status, verdict.stage) == (Status.ERROR, Stage.COMPILE)
    assert verdict.compile is not None and "with flag '-I/opt/x'" in verdict.compile.errors
    assert "Build this one at import" in verdict.compile.errors


def test_a_renamed_model_and_kernel_errors_from_the_sandbox_reach_the_verdict(where: tuple[Path, Path]) -> None:
    raised = {"function": "kl_ext.f", "error": "RuntimeError: odd batch\nat main.cpp:9"}

    def sandbox(message: JsonObject) -> JsonObject:
        if message.get("op") == Op.LOAD:
            return {"ok": True, "extensions": ["kl_ext"], "renamed": [["conv.weight", "w"], ["conv.bias", "b"]]}
        if message.get("op") == Op.TRIAL and message.get("index") == 1:
            return {**honest(message), "kernel_errors": [raised]}
        return honest(message)

    verdict, _ = run(where, sandbox)
    assert verdict.status is Status.PASS and verdict.notes == (
        "ModelNew names its parameters and buffers differently from Model, so the reference weights were loaded by "
        "registration order (KernelBench builds both models from the same seed, so names never mattered): "
        "conv.weight -> w, conv.bias -> b",)
    assert verdict.kernel_errors == (KernelError(function="kl_ext.f", error=raised["error"], trial=1),)
    assert verdict.message == ("extension function kl_ext.f raised at run time in trial 1 and forward went on "
                               "without it (the candidate caught the error): RuntimeError: odd batch\n"
                               "correct and timed")
