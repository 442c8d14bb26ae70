"""The load run's `worker.runner.AgentRunner`: a short agent job, no LLM, no harness.

``run_job`` takes the agent's real `JobSpec` and returns its real `JobResult`, and drives the real
`worker.recorder.StoreRecorder` the worker hands it, so every event it causes is a real store
write through the same code an agent job uses (lease renewal in each transaction, single-writer
event ids). One job is one trajectory of three turns, ``STEP_S`` apart:

    state queued → state running → progress started → trajectory started → message (system)
    → message (assistant, a tool call) → attempt (a timed pass) → message (tool)
    → trajectory finished → progress rejudge → attempt (the re-judging) → state succeeded

twelve events in about ``3 * STEP_S``: the shape of a real job's stream, at a pace that keeps 200
jobs within a minute on two workers. The verdict is a real `harness.Verdict` (a timed pass, so the
job ends with a verified kernel and succeeds as an agent job does), never evaluated: the worker's
re-judging of the job's best goes to `DoubleReferee`, which answers the same (the load run's
workers are built with it), and adds an attempt and its event to each job.
"""

from __future__ import annotations

import time

from agent import Evaluator, JobResult, JobSpec, LLMProvider, Recorder, StopReason, Totals
from harness import HarnessOptions, StageListener
from vocabulary.builds import CompileResult
from vocabulary.devices import DeviceSpecs
from vocabulary.evaluation import Depth, Target
from vocabulary.provenance import Provenance
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import Stage, Status, Trial, Verdict

__all__ = ["CANDIDATE", "EVENTS_PER_JOB", "STEP_S", "DoubleReferee", "run_job"]

#: The pause between the job's turns (an LLM answers in seconds; this keeps the run short).
STEP_S = 0.1
#: Events one job of this double appends, queued to succeeded.
EVENTS_PER_JOB = 12
CANDIDATE = "class ModelNew:\n    pass\n"
_VERDICT = Verdict(
    status=Status.PASS,
    stage=Stage.DONE,
    message="load double: a timed pass",
    compile=CompileResult(ok=True, seconds=0.0),
    trials=(Trial(seed_index=0, passed=True, max_abs_err=0.0, mean_abs_err=0.0, mismatch_frac=0.0),),
    timing=Timing(samples_ms=(1.0, 1.0, 1.0)),
    baselines=Baselines(eager=Timing(samples_ms=(2.0, 2.0, 2.0)), torch_compile=None),
    depth="benchmark",
    provenance=Provenance(device="cpu", harness="load-double"),
)


class DoubleReferee:
    """The referee of the load run's workers: every evaluation is the double's timed pass."""

    def __init__(self, problem: object, target: Target, options: HarnessOptions) -> None:
        self.target = target
        self.on_stage: StageListener | None = None

    def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
        return _VERDICT

    @property
    def device_specs(self) -> DeviceSpecs:
        return DeviceSpecs(target="cpu", name="load double")

    def close(self) -> None:
        pass


def run_job(spec: JobSpec, *, evaluator: Evaluator, recorder: Recorder,
            provider: LLMProvider | None = None) -> JobResult:
    """One trajectory: a system message, a tool call, its (failed) compile attempt, the tool's answer."""
    recorder.trajectory_started(index=0, temperature=0.2, strategy="load double")
    recorder.message(trajectory_index=0, role="system", content=f"problem {spec.problem.id} on {spec.target}",
                     tool_calls=None, tool_call_id=None, tokens_in=0, tokens_out=0, latency_ms=0.0, cost_usd=0.0)
    time.sleep(STEP_S)
    call = [{"id": "call_1", "type": "function", "function": {"name": "benchmark", "arguments": "{}"}}]
    recorder.message(trajectory_index=0, role="assistant", content="time it", tool_calls=call, tool_call_id=None,
                     tokens_in=100, tokens_out=50, latency_ms=STEP_S * 1000, cost_usd=0.0)
    time.sleep(STEP_S)
    recorder.attempt(trajectory_index=0, tool="benchmark", source=CANDIDATE, parent_sha256=None, verdict=_VERDICT)
    recorder.message(trajectory_index=0, role="tool", content=_VERDICT.message, tool_calls=None, tool_call_id="call_1",
                     tokens_in=0, tokens_out=0, latency_ms=0.0, cost_usd=0.0)
    time.sleep(STEP_S)
    recorder.trajectory_finished(index=0, reason="submitted")
    return JobResult(best=None, reason=StopReason.SUBMITTED, totals=Totals())
