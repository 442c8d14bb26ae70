"""The agent's public surface, pinned (the worker imports these names)."""

from __future__ import annotations

import agent


def test_public_names() -> None:
    assert sorted(agent.__all__) == sorted([
        "TOOL_SCHEMAS", "AssistantTurn", "CandidateRecord", "ContextOverflow", "Evaluator", "Failure",
        "Interrupted", "JobResult", "JobSpec", "LLMProvider", "ProviderError", "Recorder", "SerialEvaluator",
        "StopReason", "ToolCall", "ToolName", "Totals", "TrajectoryResult", "Usage", "make_provider", "run_job",
        "source_sha256", "trajectory_plan",
    ])
    for name in agent.__all__:
        assert hasattr(agent, name)


def test_fakes_satisfy_the_protocols() -> None:
    from agent.providers.scripted import ScriptedProvider
    from tests.support.doubles import FakeEvaluator, MemoryRecorder

    assert isinstance(FakeEvaluator({}), agent.Evaluator)
    assert isinstance(MemoryRecorder(), agent.Recorder)
    assert isinstance(ScriptedProvider([]), agent.LLMProvider)


def test_schemas_are_openai_function_tools() -> None:
    names = [t["function"]["name"] for t in agent.TOOL_SCHEMAS]
    assert names == [t.value for t in agent.ToolName]
    for tool in agent.TOOL_SCHEMAS:
        assert tool["type"] == "function" and tool["function"]["parameters"]["type"] == "object"
        assert tool["function"]["description"]
