"""The workers' metrics (`worker.metrics`): what a run, an evaluation and a message add.

The metrics live on prometheus_client's default registry (one per process), so every test reads
the values before and after and checks the difference.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prometheus_client import REGISTRY
from sqlalchemy.orm import Session, sessionmaker

from agent.retry import NO_RETRY
from config import Settings
from store import claim_job, session_scope
from tests.support.worker import INFRA, ScriptedReferee, agent_job, claim, evaluation_job, run_claimed
from vocabulary.builds import CompileResult
from vocabulary.evaluation import Depth, Target
from vocabulary.stages import StageSeconds
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from worker.evaluator import RefereeEvaluator
from worker.lease import LeaseKeeper
from worker.recorder import StoreRecorder
from worker.runner import RunOutcome


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _delta(read: Callable[[], float], act: Callable[[], object]) -> float:
    before = read()
    act()
    return read() - before


def _verdict(*, compile_s: float, timed: bool = True) -> Verdict:
    return Verdict(status=Status.PASS, stage=Stage.DONE if timed else Stage.COMPILE,
                   compile=CompileResult(ok=True, seconds=compile_s),
                   timing=Timing.from_samples([1.0] * 5, clock="cuda_events") if timed else None)


def test_an_evaluation_counts_its_time_its_build_and_its_gpu_seconds(tmp_path: Path) -> None:
    # On cuda the evaluator compiles first (a real build: 12.5 s), then evaluates with the build cached.
    referee = ScriptedReferee([_verdict(compile_s=12.5, timed=False), _verdict(compile_s=0.0)], target=Target.CUDA)
    evaluator = RefereeEvaluator(referee, cache_dir=tmp_path, device_key="gpu-test", retry=NO_RETRY)
    labels = {"target": "cuda", "depth": "benchmark", "status": "pass"}
    before = {
        "evaluations": _value("kernelloop_worker_evaluation_seconds_count", **labels),
        "builds": _value("kernelloop_worker_compile_seconds_count", target="cuda", ok="true"),
        "build_s": _value("kernelloop_worker_compile_seconds_sum", target="cuda", ok="true"),
        "gpu_s": _value("kernelloop_worker_gpu_seconds_total"),
    }
    try:
        assert evaluator.evaluate("class ModelNew: ...", Depth.BENCHMARK).status is Status.PASS
    finally:
        evaluator.close()
    assert _value("kernelloop_worker_evaluation_seconds_count", **labels) == before["evaluations"] + 1
    # The cached build (0 s) is not a build.
    assert _value("kernelloop_worker_compile_seconds_count", target="cuda", ok="true") == before["builds"] + 1
    assert _value("kernelloop_worker_compile_seconds_sum", target="cuda", ok="true") == before["build_s"] + 12.5
    assert _value("kernelloop_worker_gpu_seconds_total") > before["gpu_s"]


def test_an_evaluation_counts_its_stages_its_kind_and_its_lane_seconds_the_compile_included(tmp_path: Path) -> None:
    # On cuda the compile runs first (its stages in the first verdict), then the timed evaluation
    # on the device (a cached build: no compile stage): the attempt's stages are both.
    eager = Timing.from_samples([4.0] * 5, clock="cuda_events")
    compiled = _verdict(compile_s=12.5, timed=False).with_changes(
        stage_seconds=StageSeconds(header_build=2.0, compile=12.5))
    timed = _verdict(compile_s=0.0).with_changes(
        baselines=Baselines(eager=eager, torch_compile=None),
        stage_seconds=StageSeconds(load=0.25, correctness=1.5, timing=1.25))
    referee = ScriptedReferee([compiled, timed], target=Target.CUDA)
    evaluator = RefereeEvaluator(referee, cache_dir=tmp_path, device_key="gpu-kinds", retry=NO_RETRY)

    def stage(name: str, sample: str = "count") -> float:
        return _value(f"kernelloop_worker_stage_seconds_{sample}", target="cuda", stage=name)

    before = {name: (stage(name), stage(name, "sum")) for name in ("compile", "header_build", "load", "timing")}
    fast = (_value("kernelloop_worker_verdicts_total", target="cuda", kind="fast"),
            _value("kernelloop_worker_lane_seconds_total", target="cuda", kind="fast"))
    try:
        verdict = evaluator.evaluate("class ModelNew: ...", Depth.BENCHMARK)
    finally:
        evaluator.close()
    assert verdict.stage_seconds == StageSeconds(header_build=2.0, compile=12.5, load=0.25, correctness=1.5,
                                                 timing=1.25)
    for name, seconds in (("compile", 12.5), ("header_build", 2.0), ("load", 0.25), ("timing", 1.25)):
        assert (stage(name), stage(name, "sum")) == (before[name][0] + 1, before[name][1] + seconds), name
    # 1 ms against eager's 4 ms: fast; its lane is load + correctness + timing (not the compile).
    assert _value("kernelloop_worker_verdicts_total", target="cuda", kind="fast") == fast[0] + 1
    assert _value("kernelloop_worker_lane_seconds_total", target="cuda", kind="fast") == fast[1] + 3.0


def test_a_compile_error_is_a_verdict_without_lane_time(tmp_path: Path) -> None:
    broken = Verdict(status=Status.ERROR, stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE, message="compile failed",
                     compile=CompileResult(ok=False, seconds=8.0), stage_seconds=StageSeconds(compile=8.0))
    evaluator = RefereeEvaluator(ScriptedReferee([broken], target=Target.CPU), cache_dir=tmp_path, device_key="cpu",
                                 retry=NO_RETRY)
    verdicts = _value("kernelloop_worker_verdicts_total", target="cpu", kind="compile_error")
    lane = _value("kernelloop_worker_lane_seconds_total", target="cpu", kind="compile_error")
    try:
        evaluator.evaluate("class ModelNew: ...", Depth.BENCHMARK)
    finally:
        evaluator.close()
    assert _value("kernelloop_worker_verdicts_total", target="cpu", kind="compile_error") == verdicts + 1
    assert _value("kernelloop_worker_lane_seconds_total", target="cpu", kind="compile_error") == lane


def test_infra_failures_are_counted_and_never_charged_as_gpu_time(tmp_path: Path) -> None:
    referee = ScriptedReferee([INFRA], target=Target.CPU)
    evaluator = RefereeEvaluator(referee, cache_dir=tmp_path, device_key="cpu", retry=NO_RETRY)
    gpu_before = _value("kernelloop_worker_gpu_seconds_total")
    try:
        added = _delta(lambda: _value("kernelloop_worker_infra_failures_total", target="cpu"),
                       lambda: evaluator.evaluate("class ModelNew: ...", Depth.CORRECTNESS))
    finally:
        evaluator.close()
    assert added == 1
    assert _value("kernelloop_worker_gpu_seconds_total") == gpu_before
    assert _value("kernelloop_worker_evaluation_seconds_count", target="cpu", depth="correctness",
                  status="error") >= 1


def test_a_run_counts_its_queue_wait_and_its_outcome_and_is_running_meanwhile(
    sqlite_settings: Settings, sqlite_factory: sessionmaker[Session]
) -> None:
    seen_running: list[float] = []

    class Watching(ScriptedReferee):
        def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
            seen_running.append(_value("kernelloop_worker_jobs_running", target="cpu"))
            return super().evaluate(source, depth)

    with session_scope(sqlite_factory) as session:
        job_id = evaluation_job(session)
    claim(sqlite_factory, job_id)
    waits = _value("kernelloop_worker_queue_wait_seconds_count", target="cpu")
    runs = _value("kernelloop_worker_jobs_total", target="cpu", kind="evaluation", outcome="succeeded")
    running = _value("kernelloop_worker_jobs_running", target="cpu")
    outcome = run_claimed(sqlite_settings, sqlite_factory, job_id,
                          referee_factory=lambda *a: Watching([_verdict(compile_s=3.0)]))
    assert outcome is RunOutcome.SUCCEEDED
    assert _value("kernelloop_worker_queue_wait_seconds_count", target="cpu") == waits + 1
    assert _value("kernelloop_worker_jobs_total", target="cpu", kind="evaluation", outcome="succeeded") == runs + 1
    assert seen_running == [running + 1] and _value("kernelloop_worker_jobs_running", target="cpu") == running


def test_recorded_messages_count_tokens_and_cost(sqlite_factory: sessionmaker[Session]) -> None:
    with session_scope(sqlite_factory) as session:
        job_id = agent_job(session, "n/a")
    with session_scope(sqlite_factory) as session:
        assert claim_job(session=session, job_id=job_id, worker_id="w1", lease_seconds=60) is not None
    keeper = LeaseKeeper(session_factory=sqlite_factory, job_id=job_id, worker_id="w1", lease_seconds=60,
                         interval_s=10)
    recorder = StoreRecorder(session_factory=sqlite_factory, job_id=job_id, worker_id="w1", lease_seconds=60,
                             lease=keeper)
    recorder.trajectory_started(index=0)
    tokens_in, tokens_out = _value("kernelloop_worker_llm_tokens_total", direction="in"), _value(
        "kernelloop_worker_llm_tokens_total", direction="out")
    cost = _value("kernelloop_worker_llm_cost_usd_total")
    recorder.message(trajectory_index=0, role="assistant", content="hello", tokens_in=1200, tokens_out=300,
                     cost_usd=0.25)
    assert _value("kernelloop_worker_llm_tokens_total", direction="in") == tokens_in + 1200
    assert _value("kernelloop_worker_llm_tokens_total", direction="out") == tokens_out + 300
    assert _value("kernelloop_worker_llm_cost_usd_total") == cost + 0.25
