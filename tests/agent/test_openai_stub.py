"""The ``openai`` provider through the real openai client, over HTTP, against the stub server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from agent import JobResult, StopReason, run_job
from agent.providers import make_provider
from agent.providers.openai_chat import OpenAIProvider
from config.settings import LLMProfile
from problems.spec import Problem
from tests.support.agents import no_sleep, spec_for
from tests.support.doubles import FakeCandidate, FakeEvaluator, MemoryRecorder, StubChatServer, StubResponse

FAST, WRONG = "# fast\nclass ModelNew: ...\n", "# wrong\nclass ModelNew: ...\n"
TOOL_NAMES = {"get_gpu_specs", "compile", "check_correctness", "benchmark", "profile", "submit"}


def _profile(server: StubChatServer, **kw: Any) -> LLMProfile:
    return LLMProfile(provider="openai", base_url=server.base_url, model="stub-model", api_key_env=None,
                      price_in_per_mtok=1.0, price_out_per_mtok=2.0, timeout_s=5.0, stream=False, **kw)


def _evaluator() -> FakeEvaluator:
    return FakeEvaluator({FAST: FakeCandidate(median_ms=1.0), WRONG: FakeCandidate("wrong")})


def _tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


@dataclass(frozen=True)
class InjectedJob:
    """One job over HTTP whose server injects every error a real one sends, as it went."""

    result: JobResult
    recorder: MemoryRecorder
    requests: list[dict[str, Any]]
    paths: set[str]
    unanswered: int
    sleeps: list[float]


@pytest.fixture(scope="module")
def injected(seed1: Problem) -> InjectedJob:
    script = [
        StubResponse.tool_calls(("get_gpu_specs", {}), content="Shapes first."),          # 0
        StubResponse.rate_limited(retry_after=0.01),                                       # 1
        StubResponse.tool_calls(("compile", '{"source": "import torch\n')),                 # 2 malformed JSON
        StubResponse.tool_calls(("optimize", {"source": FAST})),                           # 3 unknown tool
        StubResponse.text("I will now think about tiling."),                               # 4 no tool call
        StubResponse.server_error(503),                                                    # 5
        StubResponse.tool_calls(("check_correctness", {"source": WRONG})),                 # 6
        StubResponse.server_error(502),                                                    # 7
        StubResponse.tool_calls(("benchmark", {"source": FAST})),                          # 8
        StubResponse.tool_calls(("submit", {"source": FAST}), usage=None),                 # 9 no usage
    ]
    sleeps: list[float] = []
    recorder = MemoryRecorder()
    with StubChatServer(script) as server:
        provider = OpenAIProvider.from_profile(_profile(server), sleep=sleeps.append)
        result = run_job(spec_for(seed1, llm=_profile(server)), evaluator=_evaluator(), recorder=recorder,
                         provider=provider, sleep=no_sleep)
        return InjectedJob(result, recorder, server.requests, set(server.paths), server.remaining, sleeps)


def test_a_job_over_http_survives_every_injected_error(injected: InjectedJob) -> None:
    assert injected.result.trajectories[0].reason is StopReason.SUBMITTED
    assert injected.result.best is not None and injected.result.best.source == FAST
    assert injected.unanswered == 0 and injected.paths == {"/v1/chat/completions"}
    assert len(injected.requests) == 10


def test_retries_honour_retry_after_then_back_off_and_resend_the_same_history(injected: InjectedJob) -> None:
    assert injected.sleeps == [0.01, 1.0, 1.0]  # Retry-After honoured; then exponential backoff
    requests = injected.requests
    assert requests[2]["messages"] == requests[1]["messages"]  # the 429
    assert requests[5]["messages"][-1] == requests[6]["messages"][-1]  # the 503
    assert requests[8]["messages"] == requests[7]["messages"]  # the 502


def test_every_request_carries_the_model_the_tools_and_the_playbook(injected: InjectedJob) -> None:
    for request in injected.requests:
        assert request["model"] == "stub-model" and request["temperature"] == 0.2
        assert {t["function"]["name"] for t in request["tools"]} == TOOL_NAMES
        assert request["tools"][1]["function"]["parameters"]["required"] == ["source"]
    system = injected.requests[0]["messages"][0]
    assert system["role"] == "system" and "## How your file is judged" in system["content"]


def test_the_model_is_told_what_went_wrong_with_its_own_message(injected: InjectedJob) -> None:
    requests = injected.requests
    assert "ridge point" in _tool_messages(requests[2])[-1]
    assert "not valid JSON" in _tool_messages(requests[3])[-1]  # malformed arguments fed back
    # and replaced in the history by a valid JSON record of what was attempted
    malformed = requests[3]["messages"][-2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(malformed)["arguments_received"].startswith('{"source": "import torch')
    assert _tool_messages(requests[4])[-1].startswith("error: unknown tool 'optimize'")
    nudge = requests[5]["messages"][-1]
    assert nudge["role"] == "user" and nudge["content"].startswith("Your message had no tool call")
    assert _tool_messages(requests[7])[-1].startswith("check_correctness: FAIL")


def test_the_assistants_calls_go_back_exactly_as_the_server_sent_them(injected: InjectedJob) -> None:
    sent = injected.requests[1]["messages"][2]
    assert sent["role"] == "assistant" and sent["tool_calls"][0]["function"]["name"] == "get_gpu_specs"


def test_usage_and_cost_per_message_from_the_profiles_prices(injected: InjectedJob) -> None:
    assistants = [m for m in injected.recorder.messages if m.role == "assistant"]
    assert len(assistants) == 7 and injected.result.totals.llm_calls == 7
    assert (assistants[0].tokens_in, assistants[0].tokens_out) == (120, 40)
    assert assistants[0].cost_usd == pytest.approx(120e-6 + 80e-6)
    assert assistants[0].latency_ms > 0
    assert assistants[-1].tokens_in > 1000  # no usage sent: estimated from the history


def test_refusal_and_timeout_then_success(seed1: Problem) -> None:
    script = [
        StubResponse.refusal("I can't help with that."),
        StubResponse(delay_s=1.0, body={}),  # the client times out; retried
        StubResponse.tool_calls(("submit", {"source": FAST})),
    ]
    recorder = MemoryRecorder()
    with StubChatServer(script) as server:
        profile = _profile(server).model_copy(update={"timeout_s": 0.3})
        provider = OpenAIProvider.from_profile(profile, sleep=no_sleep)
        result = run_job(spec_for(seed1, llm=profile), evaluator=_evaluator(), recorder=recorder,
                         provider=provider, sleep=no_sleep)
        assert len(server.requests) == 3
    assert result.trajectories[0].reason is StopReason.SUBMITTED
    nudge = next(m for m in recorder.messages if m.role == "user" and m.content and m.content.startswith("You"))
    assert (nudge.content or "").startswith("You declined (I can't help with that.)")


def test_exhausted_retries_and_refused_requests_fail_the_trajectory(seed1: Problem) -> None:
    with StubChatServer([StubResponse.server_error()] * 3) as server:
        profile = _profile(server, max_retries=2)
        result = run_job(spec_for(seed1, llm=profile), evaluator=_evaluator(), recorder=MemoryRecorder(),
                         provider=OpenAIProvider.from_profile(profile, sleep=no_sleep), sleep=no_sleep)
        assert len(server.requests) == 3
    assert result.reason is StopReason.LLM_ERROR and "failed after 3 tries" in (result.error or "")

    with StubChatServer([StubResponse.error(401, "Incorrect API key provided", code="invalid_api_key")]) as server:
        profile = _profile(server)
        result = run_job(spec_for(seed1, llm=profile), evaluator=_evaluator(), recorder=MemoryRecorder(),
                         provider=OpenAIProvider.from_profile(profile, sleep=no_sleep), sleep=no_sleep)
        assert len(server.requests) == 1
    assert result.reason is StopReason.LLM_ERROR and "Incorrect API key" in (result.error or "")
    assert "HTTP 401" in (result.error or "")


def test_text_tool_call_fallback_over_http(seed1: Problem) -> None:
    reply = ("Pool first, then tanh.\n```python\n" + FAST + "```\n"
             '```json\n{"tool": "benchmark", "arguments": {}}\n```')
    script = [StubResponse.text(reply), StubResponse.text('```json\n{"tool": "submit", "arguments": {"source": '
                                                          + json.dumps(FAST) + "}}\n```")]
    recorder = MemoryRecorder()
    with StubChatServer(script) as server:
        profile = _profile(server, text_tool_calls=True)
        result = run_job(spec_for(seed1, llm=profile), evaluator=_evaluator(), recorder=recorder,
                         provider=OpenAIProvider.from_profile(profile, sleep=no_sleep), sleep=no_sleep)
        requests = server.requests
    assert result.trajectories[0].reason is StopReason.SUBMITTED
    assert result.best is not None and result.best.source == FAST
    assert all("tools" not in r for r in requests)
    assert "## Calling tools" in requests[0]["messages"][0]["content"]
    second = requests[1]["messages"]
    assert {m["role"] for m in second} == {"system", "user", "assistant"}
    assert second[-1]["role"] == "user" and second[-1]["content"].startswith("Result of benchmark")
    # stored in the canonical form, with the parsed call
    stored = next(m for m in recorder.messages if m.role == "assistant")
    assert stored.tool_calls and stored.tool_calls[0]["function"]["name"] == "benchmark"


def test_make_provider_reads_the_key_from_the_profiles_environment_variable(seed1: Problem,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KL_TEST_LLM_KEY", "sk-test-123")
    with StubChatServer([StubResponse.tool_calls(("submit", {"source": FAST}))]) as server:
        profile = _profile(server).model_copy(update={"api_key_env": "KL_TEST_LLM_KEY"})
        result = run_job(spec_for(seed1, llm=profile), evaluator=_evaluator(), recorder=MemoryRecorder(),
                         sleep=no_sleep)
        assert server.headers[0].get("authorization") == "Bearer sk-test-123"
    assert result.best is not None
    assert isinstance(make_provider(LLMProfile(provider="openai", api_key_env=None), problem=seed1, target="cpu"),
                      OpenAIProvider)
    with pytest.raises(ValueError, match="unknown LLM provider"):
        make_provider(LLMProfile(provider="nope"), problem=seed1, target="cpu")
