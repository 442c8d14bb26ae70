"""An LLM endpoint that cannot be reached, or that does not stream, as a user meets them (issue 24,
item 9), through the real ``openai`` client.

A profile pointing at a closed port: the job fails naming the endpoint and the refused connection,
and is charged nothing, since no request ever left. A server that ignores ``"stream": true`` and
answers one JSON body (`LocalAIServer`): its body is the answer, and the job stops streaming to it.
A profile whose key variable is unset is refused before any request (`LLMProfile.missing_key`).
"""

from __future__ import annotations

import socket

from agent import Failure, StopReason, run_job
from agent.providers.openai_chat import OpenAIProvider
from config.settings import LLMProfile
from problems.spec import Problem
from tests.support.agents import no_sleep, spec_for
from tests.support.doubles import Call, FakeCandidate, FakeEvaluator, LocalAIServer, MemoryRecorder, Reply

FAST = "import torch\n\nclass ModelNew(torch.nn.Module):\n    # fast\n    pass\n"


def _closed_port() -> int:
    """A port nothing listens on (bound for a moment, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_closed_port_fails_the_job_naming_the_endpoint_and_charges_nothing(seed1: Problem) -> None:
    base_url = f"http://127.0.0.1:{_closed_port()}/v1"
    profile = LLMProfile(base_url=base_url, model="qwen3:32b", api_key_env=None, price_in_per_mtok=2.5,
                         price_out_per_mtok=10.0)  # the profile's default retries: 5 tries
    waits: list[float] = []
    recorder = MemoryRecorder()
    result = run_job(spec_for(seed1, llm=profile), evaluator=FakeEvaluator({}), recorder=recorder,
                     provider=OpenAIProvider.from_profile(profile, sleep=waits.append), sleep=no_sleep)
    assert result.failure is Failure.LLM_ERROR
    error = result.error or ""
    assert f"the LLM endpoint {base_url} failed after 5 tries: APIConnectionError: Connection error." in error
    assert "ConnectError" in error and "Connection refused" in error, error
    assert len(waits) == 4  # backed off between the tries, as for any connection error
    # No request reached a server: nothing is charged (it was 16,355 estimated input tokens).
    assert (result.totals.tokens_in, result.totals.tokens_out, result.totals.cost_usd) == (0, 0, 0.0)
    assert all(u.tokens_in == 0 and u.cost_usd == 0 for u in recorder.usages)


def test_a_server_that_ignores_stream_is_answered_from_its_json_body(seed1: Problem) -> None:
    script = [Reply(content="A first kernel.", calls=(Call("benchmark", {"source": FAST}),)),
              Reply(content="Good enough.", calls=(Call("submit", {"source": FAST}),))]
    with LocalAIServer(script) as server:
        profile = LLMProfile(base_url=server.base_url, model=server.model, api_key_env=None, idle_timeout_s=5.0,
                             timeout_s=10.0, max_retries=2, context_window=server.context_window,
                             max_output_tokens=1024)
        provider = OpenAIProvider.from_profile(profile, sleep=no_sleep)
        recorder = MemoryRecorder()
        result = run_job(spec_for(seed1, llm=profile), evaluator=FakeEvaluator({FAST: FakeCandidate(median_ms=1.0)}),
                         recorder=recorder, provider=provider, sleep=no_sleep)
        requests = server.requests
    assert result.trajectories[0].reason is StopReason.SUBMITTED, result.error
    assert result.best is not None and result.best.source == FAST
    # One request per turn (no retries): the first streamed, the job remembered, the next did not.
    assert len(requests) == 2 and requests[0].get("stream") is True and "stream" not in requests[1]
    assert "stream" in provider.omitted_params
    # LocalAI's usage is all zeros: the tokens are estimated rather than taken as none.
    assistants = [m for m in recorder.messages if m.role == "assistant"]
    assert assistants[0].content == "A first kernel." and all(m.tokens_in > 100 for m in assistants)


def test_a_profile_whose_key_is_unset_says_which_variable() -> None:
    profile = LLMProfile(api_key_env="KERNELLOOP_TEST_UNSET_KEY")
    assert profile.missing_key({}) == "KERNELLOOP_TEST_UNSET_KEY"
    assert profile.missing_key({"KERNELLOOP_TEST_UNSET_KEY": ""}) == "KERNELLOOP_TEST_UNSET_KEY"
    assert profile.missing_key({"KERNELLOOP_TEST_UNSET_KEY": "sk-1"}) is None
    assert LLMProfile(api_key_env=None).missing_key({}) is None
    assert LLMProfile(provider="scripted", model="scripted", api_key_env="X").missing_key({}) is None
