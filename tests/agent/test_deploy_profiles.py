"""docs/deploy.md's LLM profile examples: each parses, and runs a job against a fake server of
its kind (started as the document says) without a single refused request."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from agent import StopReason
from agent.loop import run_job
from agent.providers.openai_chat import OpenAIProvider
from config.settings import LLMProfile, Settings
from problems.spec import Problem
from tests.support.agents import no_sleep, spec_for
from tests.support.doubles import (
    Call,
    FakeCandidate,
    FakeEvaluator,
    FakeLLMServer,
    LlamaCppServer,
    MemoryRecorder,
    OllamaServer,
    OpenAIServer,
    Reply,
    SGLangServer,
    VLLMServer,
)
from tests.support.paths import REPO

DEPLOY = REPO / "docs" / "deploy.md"
_EXAMPLE = re.compile(r"```json (\w+)\n(.*?)```", re.DOTALL)
FAST = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"

#: The server each example is for, started as the document says.
SERVERS: dict[str, Callable[[list[Reply]], FakeLLMServer]] = {
    "openai": lambda s: OpenAIServer(s, model="gpt-4o-mini", context_window=128_000),
    "reasoning": lambda s: OpenAIServer(s, model="o4-mini", context_window=200_000, reasoning_model=True),
    "vllm": lambda s: VLLMServer(s, context_window=32_768, tool_parser=True, reasoning_parser=True),
    "sglang": lambda s: SGLangServer(s, context_window=32_768),
    "llamacpp": lambda s: LlamaCppServer(s, context_window=16_384, jinja=True),
    "ollama": lambda s: OllamaServer(s, context_window=16_384),
}


def _examples() -> dict[str, dict[str, object]]:
    return {name: json.loads(body) for name, body in _EXAMPLE.findall(DEPLOY.read_text())}


def test_there_is_one_example_per_server_kind_and_settings_read_them() -> None:
    examples = _examples()
    assert sorted(examples) == sorted(SERVERS)
    settings = Settings(llm_profiles=examples)  # as KERNELLOOP_LLM_PROFILES would give them
    assert settings.llm_profiles["reasoning"].max_tokens_param == "max_completion_tokens"
    assert settings.llm_profiles["ollama"].context_window == 16_384


@pytest.mark.parametrize("kind", sorted(SERVERS))
def test_each_documented_profile_runs_against_its_server(seed1: Problem, kind: str) -> None:
    script = [Reply(content="Plan.", reasoning="because", calls=(Call("benchmark", {"source": FAST}),)),
              Reply(content="Done.", calls=(Call("submit", {"source": FAST}),))]
    with SERVERS[kind](script) as server:
        example = _examples()[kind]
        profile = LLMProfile(**{**example, "base_url": server.base_url, "api_key_env": None})
        provider = OpenAIProvider.from_profile(profile, sleep=no_sleep)
        result = run_job(spec_for(seed1, llm=profile), evaluator=FakeEvaluator({FAST: FakeCandidate()}),
                         recorder=MemoryRecorder(), provider=provider, sleep=no_sleep)
        statuses, requests = server.statuses, server.requests
    assert result.trajectories[0].reason is StopReason.SUBMITTED and result.best is not None
    assert statuses == [200, 200]  # nothing refused, nothing retried
    for key, value in dict(example.get("extra_body") or {}).items():
        assert requests[0][key] == value
