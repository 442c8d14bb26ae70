"""Full jobs on the CPU target against the REAL harness: sandboxed compiles, trials and timing.

Builds are shared with the examples (the scripted LLM's candidates' extensions are byte-identical to
theirs), so only the compile-error draft costs a compile (failed builds are never cached).
Set KERNELLOOP_TEST_CACHE to keep the cache across runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent import StopReason, run_job
from agent.providers.openai_chat import OpenAIProvider
from agent.providers.scripted import ScriptedProvider
from config.settings import LLMProfile
from harness import HarnessOptions, Referee, TimingOptions
from problems.spec import Problem
from tests.support.agents import SEED1, budgets_of, no_sleep, spec_for
from tests.support.doubles import Call, MemoryRecorder, OpenAIServer, Reply
from vocabulary.verdict import Verdict

pytestmark = pytest.mark.slow


class Counting:
    """The referee, with every evaluation counted."""

    def __init__(self, inner: Referee) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def evaluate(self, source: str, depth: Any) -> Verdict:
        with self.lock:
            self.calls.append((source, str(getattr(depth, "value", depth))))
        return self.inner.evaluate(source, depth)

    @property
    def device_specs(self) -> dict[str, Any]:
        return self.inner.device_specs


@pytest.fixture(scope="module")
def referee(harness_cache: Path, seed1: Problem) -> Iterator[Referee]:
    # CPU timings of these tiny sizes on a shared 2-core CI box are noisy, and the cached eager
    # baseline with them: the quarantine (>10x) is the harness's to test, not this file's.
    options = HarnessOptions(cache_dir=harness_cache, compile_baseline=False, suspicious_speedup=1e9,
                             timing=TimingOptions(max_time_s=0.3, min_repeats=5))
    with Referee(seed1, "cpu", options) as ref:
        yield ref


@pytest.fixture(scope="module")
def scripted() -> ScriptedProvider:
    return ScriptedProvider.for_problem(SEED1, "cpu")


@pytest.fixture(scope="module")
def first_job(referee: Referee, seed1: Problem, scripted: ScriptedProvider) -> dict[str, Any]:
    recorder = MemoryRecorder()
    evaluator = Counting(referee)
    result = run_job(spec_for(seed1), evaluator=evaluator, recorder=recorder, provider=scripted, sleep=no_sleep)
    return {"result": result, "recorder": recorder, "evaluator": evaluator}


def test_scripted_job_end_to_end(first_job: dict[str, Any], scripted: ScriptedProvider) -> None:
    result, recorder = first_job["result"], first_job["recorder"]
    assert result.trajectories[0].reason is StopReason.SUBMITTED, result
    roles = [m.role for m in recorder.messages]
    assert roles[:2] == ["system", "user"] and roles.count("assistant") == 7 and roles.count("tool") == 8
    assert recorder.events[0] == ("trajectory_started", 0) and recorder.events[-1] == ("trajectory_finished", 0)
    # attempts in order, with their parents
    attempts = recorder.attempts
    assert [(a.tool, a.verdict.status) for a in attempts] == [
        ("compile", "error"), ("check_correctness", "fail"), ("check_correctness", "pass"), ("benchmark", "pass"),
        ("benchmark", "pass"), ("profile", "pass")], [a.verdict.message for a in attempts]
    assert [a.source for a in attempts] == [scripted.source(k) for k in ("draft", "wrong", "slow", "slow", "fast",
                                                                        "fast")]
    assert attempts[0].parent_sha256 is None and attempts[4].parent_sha256 == attempts[2].sha256
    results = recorder.tool_results()
    # the device (CPU here), from the real reference process
    assert "cores" in results[0] and "ridge point" in results[0]
    # the compile error: the file and the line
    assert "main.cpp:20:15: error:" in results[1] and "outt" in results[1]
    # the wrong kernel: the failing trial by name, with its error; the rest not run (it is decided)
    assert "0/1 trials pass" in results[2] and "4 later trials not run" in results[2]
    assert "trial 0 (random inputs): FAIL: max abs err" in results[2]
    # the slow one is correct and timed; the fast one is faster; the profile has rows
    assert "5/5 trials pass" in results[3] and "time:" in results[4] and "vs eager PyTorch" in results[4]
    assert "% of SOL" in results[5]
    assert "profile (self CPU time per forward" in results[6] and "mkldnn_convolution" in results[6]
    # ... and the candidate's own C++, which the CPU profiler sees only through the referee's label
    custom = [r for r in attempts[5].verdict.profile if r.name.endswith(".pool_tanh_scale_bias")]
    assert custom and custom[0].ms > 0 and custom[0].calls == 1 and custom[0].name in results[6], results[6]
    assert "identical source to an earlier benchmark call" in results[7]
    # the best: the fast kernel, verified by timing
    assert result.best is not None and result.best.source == scripted.source("fast")
    assert result.best.verdict.status == "pass" and (result.best.median_ms or 0) > 0
    assert attempts[4].verdict.timing.median_ms < attempts[3].verdict.timing.median_ms


def test_budget_cut_and_dedup_without_a_second_evaluation(first_job: dict[str, Any], referee: Referee,
                                                          seed1: Problem, scripted: ScriptedProvider) -> None:
    recorder: MemoryRecorder = first_job["recorder"]  # the same job's store: every verdict is there
    before = len(recorder.attempts)
    evaluator = Counting(referee)
    result = run_job(spec_for(seed1, budgets=budgets_of(turns=4)), evaluator=evaluator, recorder=recorder,
                     provider=scripted, sleep=no_sleep)
    trajectory = result.trajectories[0]
    assert trajectory.reason is StopReason.TURNS and trajectory.turns == 4
    assert evaluator.calls == [] and len(recorder.attempts) == before
    second = recorder.tool_results()[-5:]
    assert "(identical source to an earlier compile call" in second[1] and "main.cpp:20:15" in second[1]
    assert "(identical source to an earlier benchmark call" in second[4]
    assert result.best is not None and result.best.source == scripted.source("slow")  # cut before the fast one


def test_openai_provider_through_the_stub_server_with_the_real_harness(referee: Referee, seed1: Problem,
                                                                      scripted: ScriptedProvider) -> None:
    """Streamed, from a fake OpenAI server (a 429 with Retry-After on the way)."""
    recorder = MemoryRecorder()
    with OpenAIServer() as server:
        server.enqueue(
            Reply(content="First try.", calls=(Call("check_correctness", {"source": scripted.source("wrong")}),)),
            server.rate_limited(0),
            Reply(calls=(Call("benchmark", '{"source": "class ModelNew:'),)),  # malformed arguments
            Reply(content="Thinking about the conv bias."),  # no tool call
            Reply(calls=(Call("benchmark", {"source": scripted.source("fast")}),)),
            Reply(calls=(Call("submit", {"source": scripted.source("fast")}),)),
        )
        profile = LLMProfile(provider="openai", base_url=server.base_url, model="stub", api_key_env=None)
        provider = OpenAIProvider.from_profile(profile, sleep=no_sleep)
        result = run_job(spec_for(seed1, llm=profile), evaluator=referee, recorder=recorder, provider=provider,
                         sleep=no_sleep)
        requests = server.requests
    assert result.trajectories[0].reason is StopReason.SUBMITTED
    assert result.best is not None and result.best.source == scripted.source("fast")
    assert len(requests) == 6 and all(len(r["tools"]) == 6 for r in requests)
    fed_back = [m["content"] for m in requests[2]["messages"] if m["role"] == "tool"]
    assert fed_back[-1].startswith("check_correctness: FAIL") and "trial 0 (random inputs): FAIL" in fed_back[-1]
    assert "not valid JSON" in [m for m in requests[3]["messages"] if m["role"] == "tool"][-1]["content"]
    assert requests[4]["messages"][-1]["content"].startswith("Your message had no tool call")
    assert [a.tool for a in recorder.attempts] == ["check_correctness", "benchmark"]
