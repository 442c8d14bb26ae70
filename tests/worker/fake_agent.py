"""A stand-in for the ``agent`` package with its interface (``JobSpec``, ``Budgets``, ``run_job``).

It drives the real evaluator and recorder the worker hands it through a fixed script chosen by
the job's ``budgets["script"]``, so worker tests need no LLM and exercise the same calls the
agent makes (keyword-only, as in ``agent.protocols``):

- ``compile_then_check``: compile the seed-1 CPU example (an attempt), check its correctness
  (a second attempt, parent = the first), submit.
- ``hang_after_compile``: as above, but on the first run (no stored compile verdict yet) hang
  after the first attempt: a worker killed there leaves a stored attempt behind. A re-run finds
  the stored verdict (dedup by source) and carries on.
- ``until_cancelled``: chat until the recorder says the job was cancelled.
- ``quarantine``: report the seed-1 example as quarantined (``suspicious``) without evaluating.
- ``fail``: end with a job-level error, as the agent does when every trajectory failed.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from tests.worker.support import SEED1_CPU

CALLS: list[str] = []


@dataclass(frozen=True, kw_only=True)
class Budgets:
    turns: int = 10
    tool_calls: int = 30
    max_tokens: int = 400_000
    max_cost_usd: float = 5.0
    wall_clock_s: float = 3600.0
    script: str = "compile_then_check"


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    problem: Any
    target: str
    llm: Any
    budgets: Budgets = field(default_factory=Budgets)
    trajectories: int = 1
    random_trials: int = 3


@dataclass(frozen=True)
class JobResult:
    reason: str
    error: str | None = None
    quarantined: tuple[dict[str, Any], ...] = ()


def _sha(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _tool_call(name: str, n: int) -> list[dict[str, Any]]:
    return [{"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": "{\"source\": \"…\"}"}}]


def run_job(spec: JobSpec, *, evaluator: Any, recorder: Any, provider: Any) -> JobResult:
    script = spec.budgets.script
    CALLS.append(script)
    recorder.trajectory_started(index=0, temperature=0.2, strategy="fuse the epilogue")
    recorder.message(trajectory=0, role="system", content=f"problem {spec.problem.id} on {spec.target}",
                     tool_calls=None, tool_call_id=None, tokens_in=0, tokens_out=0, latency_ms=0.0, cost_usd=0.0)
    if script == "until_cancelled":
        turn = 0
        while not recorder.cancelled():
            turn += 1
            recorder.message(trajectory=0, role="assistant", content=f"thinking {turn}", tool_calls=None,
                             tool_call_id=None, tokens_in=10, tokens_out=5, latency_ms=1.0, cost_usd=0.001)
            time.sleep(0.1)
        recorder.trajectory_finished(index=0, reason="cancelled")
        return JobResult(reason="cancelled")

    sha = _sha(SEED1_CPU)
    if script == "quarantine":
        entry = {"source": SEED1_CPU, "source_sha256": sha, "tool": "benchmark", "trajectory": 0,
                 "status": "suspicious"}
        recorder.trajectory_finished(index=0, reason="submitted")
        return JobResult(reason="completed", quarantined=(entry,))
    if script == "fail":
        recorder.trajectory_finished(index=0, reason="llm_error")
        return JobResult(reason="llm_error", error="the LLM endpoint failed: 401 Unauthorized")
    recorder.message(trajectory=0, role="assistant", content="compile it", tool_calls=_tool_call("compile", 1),
                     tool_call_id=None, tokens_in=100, tokens_out=50, latency_ms=12.0, cost_usd=0.01)
    first_run = recorder.find_attempt(source_sha256=sha, tool="compile") is None
    if first_run:
        verdict = evaluator.evaluate(SEED1_CPU, "compile")
        recorder.attempt(trajectory=0, tool="compile", source=SEED1_CPU, parent_sha256=None, verdict=verdict.to_dict())
    recorder.message(trajectory=0, role="tool", content="compiled", tool_calls=None, tool_call_id="call_1",
                     tokens_in=0, tokens_out=0, latency_ms=0.0, cost_usd=0.0)
    if script == "hang_after_compile" and first_run:
        while True:  # the test kills this worker here
            time.sleep(1)
    verdict = evaluator.evaluate(SEED1_CPU, "correctness")
    recorder.attempt(trajectory=0, tool="check_correctness", source=SEED1_CPU, parent_sha256=sha,
                     verdict=verdict.to_dict())
    recorder.trajectory_finished(index=0, reason="submitted")
    return JobResult(reason="submitted")
