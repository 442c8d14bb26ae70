"""The agent loop: an LLM proposes ``ModelNew`` programs, the referee judges them, everything is stored.

Public surface::

    from agent import run_job, JobSpec, JobResult, Evaluator, Recorder, SerialEvaluator
    from vocabulary.budgets import Budgets

`run_job` needs an `Evaluator` (a `harness.Referee`), a `Recorder` (the worker's, over the store)
and an LLM provider (built from the job's `config.settings.LLMProfile` unless one is passed).
Importing this package needs torch-free stdlib plus the shared `vocabulary`; the ``openai``
package is imported only when an ``openai`` provider is built.

Owns: the job's values (`JobSpec`, `StopReason`, `JobResult`, `CandidateRecord`:
`agent.job`), the tools and their feedback, the one infra-retry policy (`agent.retry`), the
`Evaluator`/`Recorder` protocols it is driven through.
May import: `vocabulary` (the verdict and its parts), `harness` (`Referee` only, to type the
default evaluator), `problems`, `config` (the LLM profile), the standard library, and ``openai``
lazily.
In and out: a `JobSpec` comes in; `Verdict` values come from the `Evaluator`; everything that
happens goes out through the `Recorder` (verdicts as `Verdict`s), and `run_job` returns a
`JobResult` whose best and quarantined candidates are `CandidateRecord`s. JSON only towards the
LLM: the history's messages and the tool schemas are `vocabulary.wire.JsonObject`s
(`agent.providers.base.Message`, read through `message_calls`, `call_function`, `text_field`).
"""

from agent.job import CandidateRecord, Failure, JobResult, JobSpec, StopReason, Totals, TrajectoryResult
from agent.loop import run_job, trajectory_plan
from agent.protocols import Evaluator, Recorder
from agent.providers import (
    AssistantTurn,
    ContextOverflow,
    Interrupted,
    LLMProvider,
    ProviderError,
    ToolCall,
    Usage,
    make_provider,
)
from agent.serial import SerialEvaluator
from agent.tools import TOOL_SCHEMAS, ToolName, source_sha256

__all__ = [
    "TOOL_SCHEMAS",
    "AssistantTurn",
    "CandidateRecord",
    "ContextOverflow",
    "Evaluator",
    "Failure",
    "Interrupted",
    "JobResult",
    "JobSpec",
    "LLMProvider",
    "ProviderError",
    "Recorder",
    "SerialEvaluator",
    "StopReason",
    "ToolCall",
    "ToolName",
    "Totals",
    "TrajectoryResult",
    "Usage",
    "make_provider",
    "run_job",
    "source_sha256",
    "trajectory_plan",
]
