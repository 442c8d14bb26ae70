"""A `worker.runner.AgentRunner` for worker tests: ``run_job`` takes the agent's real `JobSpec`
and returns its real `JobResult`, with a fixed script instead of an LLM.

It drives the real evaluator and recorder the worker hands it through the script named by the
job's LLM model (``llm_model``, which the worker puts into ``spec.llm.model``), so worker tests
need no LLM and exercise the same calls the agent makes (keyword-only, as in ``agent.protocols``):

- ``compile_then_check``: compile the seed-1 CPU example (an attempt), check its correctness
  (a second attempt, parent = the first), submit.
- ``hang_after_compile``: as above, but on the first run (no stored compile verdict yet) hang
  after the first attempt: a worker killed there leaves a stored attempt behind. A re-run finds
  the stored verdict (dedup by source) and carries on.
- ``until_cancelled``: chat until the recorder says the job was cancelled.
- ``quarantine``: report the seed-1 example as quarantined (``suspicious``) without evaluating.
- ``fail``: end with a job-level error, as the agent does when every trajectory failed.
- ``benchmark_two``: benchmark two sources (`TWO_SOURCES`), submit; the worker then re-judges them.
"""

from __future__ import annotations

import time
from typing import Any

from agent import CandidateRecord, Evaluator, JobResult, JobSpec, LLMProvider, Recorder, StopReason, Totals
from tests.support.worker import SEED1_CPU
from vocabulary.evaluation import Depth
from vocabulary.verdict import Stage, Status, Verdict, source_sha256

CALLS: list[str] = []
#: What ``benchmark_two`` benchmarks, in order.
TWO_SOURCES = (SEED1_CPU, SEED1_CPU + "\n# the second version\n")


def _result(reason: StopReason, *, error: str | None = None,
            quarantined: tuple[CandidateRecord, ...] = ()) -> JobResult:
    return JobResult(best=None, reason=reason, totals=Totals(), quarantined=quarantined, error=error)


def _tool_call(name: str, n: int) -> list[dict[str, Any]]:
    return [{"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": "{\"source\": \"…\"}"}}]


def run_job(spec: JobSpec, *, evaluator: Evaluator, recorder: Recorder,
            provider: LLMProvider | None = None) -> JobResult:
    script = spec.llm.model
    CALLS.append(script)
    recorder.trajectory_started(index=0, temperature=0.2, strategy="fuse the epilogue")
    recorder.message(trajectory_index=0, role="system", content=f"problem {spec.problem.id} on {spec.target}",
                     tool_calls=None, tool_call_id=None, tokens_in=0, tokens_out=0, latency_ms=0.0, cost_usd=0.0)
    if script == "until_cancelled":
        turn = 0
        while not recorder.cancelled():
            turn += 1
            recorder.message(trajectory_index=0, role="assistant", content=f"thinking {turn}", tool_calls=None,
                             tool_call_id=None, tokens_in=10, tokens_out=5, latency_ms=1.0, cost_usd=0.001)
            time.sleep(0.1)
        recorder.trajectory_finished(index=0, reason="cancelled")
        return _result(StopReason.CANCELLED)

    sha = source_sha256(SEED1_CPU)
    if script == "quarantine":
        suspicious = Verdict(status=Status.SUSPICIOUS, stage=Stage.DONE, message="faster than believed")
        entry = CandidateRecord(source=SEED1_CPU, source_sha256=sha, tool="benchmark", trajectory_index=0,
                                parent_sha256=None, verdict=suspicious)
        recorder.trajectory_finished(index=0, reason="submitted")
        return _result(StopReason.COMPLETED, quarantined=(entry,))
    if script == "benchmark_two":
        for n, source in enumerate(TWO_SOURCES):
            verdict = evaluator.evaluate(source, Depth.BENCHMARK)
            recorder.attempt(trajectory_index=0, tool="benchmark", source=source,
                             parent_sha256=source_sha256(TWO_SOURCES[0]) if n else None, verdict=verdict)
        recorder.trajectory_finished(index=0, reason="submitted")
        return _result(StopReason.SUBMITTED)
    if script == "fail":
        recorder.trajectory_finished(index=0, reason="llm_error")
        return _result(StopReason.LLM_ERROR, error="the LLM endpoint failed: 401 Unauthorized")
    recorder.message(trajectory_index=0, role="assistant", content="compile it", tool_calls=_tool_call("compile", 1),
                     tool_call_id=None, tokens_in=100, tokens_out=50, latency_ms=12.0, cost_usd=0.01)
    first_run = recorder.find_attempt(source_sha256=sha, tool="compile") is None
    if first_run:
        verdict = evaluator.evaluate(SEED1_CPU, Depth.COMPILE)
        recorder.attempt(trajectory_index=0, tool="compile", source=SEED1_CPU, parent_sha256=None, verdict=verdict)
    recorder.message(trajectory_index=0, role="tool", content="compiled", tool_calls=None, tool_call_id="call_1",
                     tokens_in=0, tokens_out=0, latency_ms=0.0, cost_usd=0.0)
    if script == "hang_after_compile" and first_run:
        while True:  # the test kills this worker here
            time.sleep(1)
    verdict = evaluator.evaluate(SEED1_CPU, Depth.CORRECTNESS)
    recorder.attempt(trajectory_index=0, tool="check_correctness", source=SEED1_CPU, parent_sha256=sha, verdict=verdict)
    recorder.trajectory_finished(index=0, reason="submitted")
    return _result(StopReason.SUBMITTED)
