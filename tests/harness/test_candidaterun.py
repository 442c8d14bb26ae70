"""The candidate run's steps against a scripted stage and comparer (no process, no compile): what
each reply, honest or not, makes of the verdict. A stage that sends garbage gets the verdict the
referee has always given it (its fault, at the step it was in)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.assembly import VerdictFacts
from harness.candidaterun import MALFORMED_TIMING, CandidateSteps, RunContext
from harness.channel import ChannelTimeout
from harness.draft import Draft
from harness.options import Depth, HarnessOptions, Target, TimingOptions
from harness.progress import StageReporter
from harness.protocol import Op
from harness.protocol.reference import Compared, CompareItem
from harness.sandboxspec import SandboxReport
from harness.seeds import plan_trials
from harness.stagepool import StartedStage
from harness.verdict import ErrorKind, Stage, Status, Verdict
from harness.wire import JsonObject
from problems import load_problem

PROBLEM = load_problem("level2/conv_tanh_scale_bias_maxpool")
TRIALS = tuple(plan_trials(3, trials=2, input_variants=False, extra_shapes=[]))
OUTPUT: JsonObject = {"kind": "file", "name": "x.bin", "tensors": [], "single": True}
#: What the no-op substitution trial of an extension that does real work returns: noise.
NOISE: JsonObject = {"kind": "file", "name": "noop-0.bin", "tensors": [], "single": True}
Reply = Callable[[JsonObject], JsonObject]


def honest(message: JsonObject) -> JsonObject:
    """What an honest candidate stage answers."""
    op = message.get("op")
    if op == Op.LOAD:
        return {"ok": True, "extensions": ["kl_ext"]}
    if op == Op.TRIAL:
        return {"output": NOISE if message.get("noop") else OUTPUT, "flags": []}
    if op == Op.PROFILE:
        return {"kernels": [{"name": "k", "calls": 1, "ms_per_forward": 0.5}]}
    if op == Op.TIME:
        return {"timing": {"samples_ms": [0.001] * 5, "clock": "perf_counter"}, "flags": [],
                "kept": [{"index": 0, "call": 9, "output": OUTPUT}, {"index": 1, "call": 10, "output": OUTPUT}]}
    raise AssertionError(message)


class FakeProcess:
    def __init__(self, answer: Reply) -> None:
        self.answer = answer
        self.sandbox_report = SandboxReport(received=True, namespaces=("user", "mount"))
        self.killed = False
        self.asked: list[JsonObject] = []

    def request(self, message: Any, *, timeout: float) -> JsonObject:
        raw = message.to_dict()
        self.asked.append(raw)
        return self.answer(raw)

    def log_tail(self, limit: int) -> str:
        return "the stage's log"

    def describe_exit(self, wait_s: float = 2.0) -> str:
        return "killed by SIGSEGV"

    def kill(self) -> None:
        self.killed = True

    def close(self) -> None:
        self.killed = True

    def __enter__(self) -> FakeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class FakeReference:
    """The comparer: every output passes but noise (``passes`` says otherwise)."""

    target = Target.CPU
    transport = "file"

    def __init__(self, passes: Callable[[CompareItem], bool] = lambda item: item.output != NOISE) -> None:
        self.passes = passes

    def compare(self, items: tuple[CompareItem, ...], directory: Path) -> tuple[Compared, ...]:
        return tuple(Compared(passed=self.passes(i), max_abs_err=0.0, mean_abs_err=0.0, mismatch_frac=0.0,
                              message="") for i in items)

    def loop_overhead(self, timing: TimingOptions, sets: tuple[int, ...]) -> float:
        return 0.0


FACTS = VerdictFacts(target=Target.CPU, problem_sha256="ab" * 32, mode="train", policy="mixed", atol=None, rtol=None,
                     trials=len(TRIALS), seeds="s", hardened_timing=False, transport="file", reference=None,
                     python="3.11", host="h", pid=1, output_limit=1000)


def run(tmp_path: Path, answer: Reply = honest, *, depth: Depth = Depth.BENCHMARK,
        reference: FakeReference | None = None) -> tuple[Verdict, FakeProcess]:
    process = FakeProcess(answer)
    (tmp_path / "run").mkdir(exist_ok=True)
    context = RunContext(problem=PROBLEM, options=HarnessOptions(cache_dir=tmp_path / "cache"), trials=TRIALS,
                         secret=3, reference=reference or FakeReference(),  # type: ignore[arg-type]
                         settle=lambda stage: None, facts=lambda: FACTS)
    stage = StartedStage(process=process, run_dir=tmp_path, ready=True)  # type: ignore[arg-type]
    verdict = CandidateSteps(context, stage, "class ModelNew: ...", StageReporter(None)).run(Draft(depth=depth))
    return verdict, process


def but(op: Op, reply: JsonObject | Callable[[JsonObject], JsonObject]) -> Reply:
    """The honest stage, except for its answer to ``op``."""
    def answer(message: JsonObject) -> JsonObject:
        if message.get("op") != op:
            return honest(message)
        return reply(message) if callable(reply) else reply
    return answer


def test_an_honest_candidate_passes_each_depth(tmp_path: Path) -> None:
    checked, _ = run(tmp_path, depth=Depth.CORRECTNESS)
    assert (checked.status, checked.stage, checked.message) == (Status.PASS, Stage.CORRECTNESS, "correct (not timed)")
    assert len(checked.trials) == 2 and checked.log == "" and checked.provenance.sandbox == ("user", "mount")
    timed, process = run(tmp_path)
    assert (timed.status, timed.stage, timed.message) == (Status.PASS, Stage.DONE, "correct and timed")
    assert timed.timing is not None and timed.timing.n == 5 and not timed.flags
    assert [m["op"] for m in process.asked] == ["load", "trial", "trial", "trial", "time"]  # the last: no-op
    profiled, _ = run(tmp_path, depth=Depth.PROFILE)
    assert profiled.status is Status.PASS and profiled.profile[0].ms == 0.5


@pytest.mark.parametrize(("op", "reply", "stage"), [
    (Op.TIME, {"timing": {"samples_ms": [1.0]}, "kept": [{"index": "0", "call": 1, "output": {}}]}, Stage.TIMING),
    (Op.TIME, {"timing": "fast"}, Stage.TIMING),
])
def test_a_malformed_timing_reply_is_the_candidates_fault(tmp_path: Path, op: Op, reply: JsonObject,
                                                          stage: Stage) -> None:
    verdict, _ = run(tmp_path, but(op, reply))
    assert (verdict.status, verdict.stage, verdict.error_kind) == (Status.ERROR, stage, ErrorKind.CANDIDATE)
    assert verdict.message == MALFORMED_TIMING and verdict.log == "the stage's log"


@pytest.mark.parametrize(("op", "reply", "stage"), [
    (Op.LOAD, {"ok": True, "extensions": "kl_ext"}, Stage.LOAD),
    (Op.TRIAL, {"output": OUTPUT, "flags": "none"}, Stage.CORRECTNESS),
    (Op.TRIAL, {"output": OUTPUT, "ops": {"addmm": 1}}, Stage.CORRECTNESS),
    (Op.PROFILE, {"kernels": [{"calls": 1}]}, Stage.TIMING),
])
def test_any_other_malformed_reply_is_the_candidates_fault_at_its_step(tmp_path: Path, op: Op, reply: JsonObject,
                                                                       stage: Stage) -> None:
    verdict, _ = run(tmp_path, but(op, reply), depth=Depth.PROFILE if op is Op.PROFILE else Depth.BENCHMARK)
    assert (verdict.status, verdict.stage, verdict.error_kind) == (Status.ERROR, stage, ErrorKind.CANDIDATE)
    assert "malformed reply" in verdict.message


def test_a_forward_that_raises_keeps_the_trials_before_it(tmp_path: Path) -> None:
    def second_raises(message: JsonObject) -> JsonObject:
        return {"error": "ValueError: no"} if message.get("index") == 1 else honest(message)

    verdict, _ = run(tmp_path, but(Op.TRIAL, second_raises))
    assert (verdict.status, verdict.stage) == (Status.ERROR, Stage.CORRECTNESS)
    assert verdict.message == "forward raised in trial 1:\nValueError: no"
    assert [t.seed_index for t in verdict.trials] == [0] and verdict.flags == ()


def test_a_stage_that_times_out_is_killed_and_keeps_no_flags(tmp_path: Path) -> None:
    def hangs(message: JsonObject) -> JsonObject:
        raise ChannelTimeout("no reply in time")

    verdict, process = run(tmp_path, but(Op.TRIAL, hangs))
    assert (verdict.status, verdict.stage, verdict.message) == (Status.ERROR, Stage.CORRECTNESS, "trial 0 timed out")
    assert verdict.trials == () and process.killed
    timed, _ = run(tmp_path, but(Op.TIME, hangs))
    assert timed.stage is Stage.TIMING and timed.message == "timing timed out" and len(timed.trials) == 2


def test_integrity_flags_fail_the_candidate(tmp_path: Path) -> None:
    none_loaded, _ = run(tmp_path, but(Op.LOAD, {"ok": True, "extensions": []}))
    assert (none_loaded.status, none_loaded.stage) == (Status.FAIL, Stage.INTEGRITY)
    assert none_loaded.flags == ("no_custom_kernel",)
    no_work, _ = run(tmp_path, reference=FakeReference(passes=lambda item: True))  # the no-op output is right
    assert (no_work.status, no_work.stage, no_work.flags) == (Status.FAIL, Stage.INTEGRITY, ("extension_does_no_work",))
    assert len(no_work.trials) == 2 and no_work.log == "the stage's log"
    mismatch, _ = run(tmp_path, reference=FakeReference(passes=lambda item: item.call is None and item.output != NOISE))
    assert (mismatch.status, mismatch.stage) == (Status.FAIL, Stage.INTEGRITY)
    assert mismatch.flags == ("timed_output_mismatch",) and mismatch.timing is not None
    forged, _ = run(tmp_path, but(Op.TIME, lambda m: {**honest(m), "timing": {"samples_ms": [1e6]}}))
    assert forged.flags == ("clock_disagrees",) and "timer was tampered with" in forged.message


def test_a_load_failure_says_what_failed(tmp_path: Path) -> None:
    verdict, _ = run(tmp_path, but(Op.LOAD, {"ok": False, "message": "loading the candidate failed",
                                             "errors": "AttributeError: ModelNew"}))
    assert (verdict.status, verdict.stage, verdict.error_kind) == (Status.ERROR, Stage.LOAD, ErrorKind.CANDIDATE)
    assert verdict.message == "loading the candidate failed:\nAttributeError: ModelNew"
