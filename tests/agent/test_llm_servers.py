"""The agent loop against the LLM servers people run, through the real ``openai`` client.

Each test drives `agent.run_job` against a fake server (`tests.support.doubles`) that validates,
fails and streams the way its real counterpart does (the server modules cite their sources),
and covers one row of issue 14's table, or streaming, Retry-After, the strict-history check.
No compiles: a `FakeEvaluator` judges the candidates.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterable
from typing import Any

import pytest

from agent import Failure, JobResult, StopReason, run_job, source_sha256
from agent.providers.openai_chat import OpenAIProvider, is_context_overflow, split_think
from config.settings import LLMProfile
from problems.spec import Problem
from tests.support.agents import budgets_of, no_sleep, spec_for
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
from tests.support.doubles.llm_server import roles_alternate
from vocabulary.budgets import Budgets

FAST = "import torch\n\nclass ModelNew(torch.nn.Module):\n    # fast\n    pass\n"
SLOW = "import torch\n\nclass ModelNew(torch.nn.Module):\n    # slow\n    pass\n"
WRONG = "import torch\n\nclass ModelNew(torch.nn.Module):\n    # wrong\n    pass\n"


def _source(i: int, size: int = 1400) -> str:
    """A distinct candidate of about ``size`` characters."""
    body = "".join(f"    x{i}_{k} = torch.relu(x) * {k}  # step {k} of variant {i}\n" for k in range(size // 48))
    return f"import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n{body}        return x\n"


def _evaluator(**extra: FakeCandidate) -> FakeEvaluator:
    table = {FAST: FakeCandidate(median_ms=1.0), SLOW: FakeCandidate(median_ms=3.0), WRONG: FakeCandidate("wrong")}
    return FakeEvaluator({**table, **extra})


def _profile(server: FakeLLMServer, **kw: Any) -> LLMProfile:
    settings: dict[str, Any] = {"base_url": server.base_url, "model": server.model, "api_key_env": None,
                                "idle_timeout_s": 5.0, "timeout_s": 10.0, "max_retries": 2,
                                "context_window": server.context_window, "max_output_tokens": 2048}
    settings.update(kw)
    return LLMProfile(**settings)


def _run(problem: Problem, server: FakeLLMServer, profile: LLMProfile, *, budgets: Budgets | None = None,
         evaluator: FakeEvaluator | None = None, recorder: MemoryRecorder | None = None,
         sleeps: list[float] | None = None) -> tuple[JobResult, MemoryRecorder]:
    recorder = recorder or MemoryRecorder()
    provider = OpenAIProvider.from_profile(profile, sleep=sleeps.append if sleeps is not None else no_sleep)
    result = run_job(spec_for(problem, llm=profile, budgets=budgets), evaluator=evaluator or _evaluator(),
                     recorder=recorder, provider=provider, sleep=no_sleep)
    return result, recorder


def _tool_texts(recorder: MemoryRecorder) -> list[str]:
    return recorder.tool_results(0)


def _assistant(recorder: MemoryRecorder) -> list[Any]:
    return [m for m in recorder.messages if m.role == "assistant"]


def _arguments_are_json_objects(requests: Iterable[dict[str, Any]]) -> bool:
    for request in requests:
        for message in request["messages"]:
            for call in message.get("tool_calls") or ():
                if not isinstance(json.loads(call["function"]["arguments"]), dict):
                    return False
    return True


# -- row 1: a reasoning model refuses temperature and max_tokens ---------------------------------
def test_reasoning_model_parameters_are_dropped_once_remembered_and_reasoning_is_priced(seed1: Problem) -> None:
    """OpenAI reasoning models answer 400 ``unsupported_parameter`` for ``temperature`` and for
    ``max_tokens`` ("Use 'max_completion_tokens' instead."), and report hidden reasoning in
    ``usage.completion_tokens_details.reasoning_tokens`` (`tests.support.doubles.openai_server`)."""
    script = [Reply(content="Plan: fuse.", reasoning="r " * 300, calls=(Call("benchmark", {"source": FAST}),)),
              Reply(content="Done.", reasoning="s " * 100, calls=(Call("submit", {"source": FAST}),))]
    with OpenAIServer(script, model="o4-mini", reasoning_model=True) as server:
        profile = _profile(server, price_in_per_mtok=1.0, price_out_per_mtok=4.0, price_reasoning_per_mtok=8.0)
        result, recorder = _run(seed1, server, profile)
        statuses, requests, exchanges = server.statuses, server.requests, server.exchanges
    assert result.trajectories[0].reason is StopReason.SUBMITTED and result.best is not None
    # retried without temperature, then with max_completion_tokens; remembered: no more 400s
    assert statuses == [400, 400, 200, 200]
    assert "temperature" in requests[0] and "temperature" not in requests[1]
    assert requests[1]["max_tokens"] == 2048 and "max_completion_tokens" not in requests[1]
    for request in requests[2:]:
        assert "temperature" not in request and "max_tokens" not in request
        assert request["max_completion_tokens"] == 2048
    # reasoning tokens recorded apart and priced at their own rate
    first = _assistant(recorder)[0]
    reasoning = 300
    assert first.tokens_reasoning == reasoning and first.tokens_in == exchanges[2].prompt_tokens
    visible = first.tokens_out - reasoning
    assert first.cost_usd == pytest.approx((first.tokens_in * 1.0 + visible * 4.0 + reasoning * 8.0) / 1e6)
    assert result.totals.tokens_reasoning == 400


# -- row 2: reasoning_content, <think> in the content -------------------------------------------
@pytest.mark.parametrize("server_kind", ["vllm_reasoning_parser", "llamacpp_reasoning_format_none"])
def test_reasoning_is_kept_out_of_the_resent_history(seed1: Problem, server_kind: str) -> None:
    """vLLM with ``--reasoning-parser`` returns ``reasoning_content`` apart; llama.cpp with
    ``--reasoning-format none`` leaves ``<think>...</think>`` in the content. Neither is sent back
    (profile default ``strip_think``, ``reasoning_history: drop``)."""
    thoughts = "Let me think about the pooling window. " * 125  # ~4.9 KB per turn
    script = [Reply(content="Plan: pool first.", reasoning=thoughts, calls=(Call("check_correctness",
                                                                                  {"source": WRONG}),)),
              Reply(content="Fix the bias.", reasoning=thoughts, calls=(Call("benchmark", {"source": FAST}),)),
              Reply(content="Submit.", reasoning=thoughts, calls=(Call("submit", {"source": FAST}),))]
    server: FakeLLMServer = (VLLMServer(script) if server_kind == "vllm_reasoning_parser"
                              else LlamaCppServer(script, reasoning_format="none"))
    with server:
        result, recorder = _run(seed1, server, _profile(server))
        requests = server.requests
    assert result.best is not None and [a.tool for a in recorder.attempts] == ["check_correctness", "benchmark"]
    for request in requests[1:]:
        for message in request["messages"]:
            assert "<think>" not in (message.get("content") or "") and "reasoning_content" not in message
    growth = [len(json.dumps(b["messages"])) - len(json.dumps(a["messages"])) for a, b in itertools.pairwise(requests)]
    assert max(growth) < 2500  # a turn's call and verdict, not its 4.9 KB of thoughts
    assert [m.content for m in _assistant(recorder)] == ["Plan: pool first.", "Fix the bias.", "Submit."]


def test_reasoning_can_be_passed_back_per_profile(seed1: Problem) -> None:
    """Servers whose templates interleave reasoning get ``reasoning_content`` back when the profile
    says ``reasoning_history: pass_back``."""
    script = [Reply(content="Plan.", reasoning="because", calls=(Call("benchmark", {"source": FAST}),)),
              Reply(content="Submit.", calls=(Call("submit", {"source": FAST}),))]
    with VLLMServer(script) as server:
        result, _ = _run(seed1, server, _profile(server, reasoning_history="pass_back"))
        second = server.requests[1]["messages"]
    assert result.best is not None
    assert [m.get("reasoning_content") for m in second if m["role"] == "assistant"] == ["because"]


def test_think_blocks_are_split_from_the_content() -> None:
    assert split_think("<think>a</think>\n\nanswer") == ("answer", "a")
    assert split_think("opened in the prompt</think>answer") == ("answer", "opened in the prompt")
    assert split_think("answer <think>cut off while thin") == ("answer", "cut off while thin")
    assert split_think("no thoughts") == ("no thoughts", None)


# -- row 3: code but no tool call; servers refusing tools ----------------------------------------
def test_code_without_a_tool_call_switches_the_trajectory_to_the_text_protocol(seed1: Problem) -> None:
    """A server without a working tool parser hands the model's calls back as text (here: vLLM,
    tools accepted, the candidate in a python fence and no ``tool_calls``)."""
    fence = f"Here is my kernel:\n```python\n{FAST}```"
    script = [Reply(content=fence),
              Reply(content=fence + '\n```json\n{"tool": "benchmark", "arguments": {}}\n```'),
              Reply(content='```json\n{"tool": "submit", "arguments": {"source": ' + json.dumps(FAST) + "}}\n```")]
    with VLLMServer(script) as server:
        result, recorder = _run(seed1, server, _profile(server))
        requests = server.requests
    assert result.trajectories[0].reason is StopReason.SUBMITTED and result.best is not None
    nudge = [m.content or "" for m in recorder.messages if m.role == "user"][1]
    assert "call tools in text" in nudge and '{"tool": "benchmark", "arguments": {}}' in nudge
    assert "tools" in requests[0] and all("tools" not in r for r in requests[1:])
    assert "## Calling tools" in requests[1]["messages"][0]["content"]
    assert [a.tool for a in recorder.attempts] == ["benchmark"]


@pytest.mark.parametrize("server_kind", ["vllm_without_tool_parser", "llamacpp_without_jinja",
                                         "ollama_model_without_tools"])
def test_a_server_refusing_tools_is_answered_in_text_at_once(seed1: Problem, server_kind: str) -> None:
    """vLLM without ``--enable-auto-tool-choice`` (400 '"auto" tool choice requires ...'), llama.cpp
    without ``--jinja`` (500 "tools param requires --jinja flag"), Ollama for a model without the
    tools capability (400 "... does not support tools"): the request is sent again without tools,
    in the text protocol, and the job remembers it."""
    script = [Reply(content=f"```python\n{FAST}```\n" + '```json\n{"tool": "benchmark", "arguments": {}}\n```'),
              Reply(content='```json\n{"tool": "submit", "arguments": {}}\n```\n```python\n' + FAST + "```")]
    server: FakeLLMServer = {
        "vllm_without_tool_parser": lambda: VLLMServer(script, tool_parser=False),
        "llamacpp_without_jinja": lambda: LlamaCppServer(script, jinja=False),
        "ollama_model_without_tools": lambda: OllamaServer(script, supports_tools=False, context_window=16_384),
    }[server_kind]()
    with server:
        result, recorder = _run(seed1, server, _profile(server))
        statuses, requests = server.statuses, server.requests
    assert result.trajectories[0].reason is StopReason.SUBMITTED and result.best is not None
    assert statuses[0] in (400, 500) and statuses[1:] == [200, 200]
    assert "tools" in requests[0] and all("tools" not in r for r in requests[1:])
    assert [a.tool for a in recorder.attempts] == ["benchmark"]


def test_a_model_that_never_calls_a_tool_ends_the_job_saying_so(seed1: Problem) -> None:
    """No code evaluated: the job has no verified kernel and says the model made no attempt."""
    with VLLMServer([Reply(content="I would tile it.")] * 3) as server:
        result, recorder = _run(seed1, server, _profile(server), budgets=budgets_of(turns=3))
    assert result.best is None and result.failure is Failure.NO_ATTEMPT and not recorder.attempts
    assert (result.error or "").startswith("the model made no attempt: none of its 3 replies had a usable tool call")
    assert "turns budget (3) ran out" in (result.error or "")


# -- row 4: cut off at the output limit -----------------------------------------------------------
def test_a_reply_cut_at_the_output_limit_is_told_so_and_costs_nothing(seed1: Problem) -> None:
    """``finish_reason: "length"`` with the tool call's JSON cut mid-string; the output limit is
    always sent (``max_tokens``)."""
    cut = '{"source": "import torch\\n\\nclass ModelNew(torch.nn.Module):\\n    def forw'
    script = [Reply(content="Long reasoning. " * 20, calls=(Call("compile", cut),), finish_reason="length"),
              Reply(content="Short now.", calls=(Call("submit", {"source": FAST}),))]
    with VLLMServer(script) as server:
        result, recorder = _run(seed1, server, _profile(server, max_output_tokens=1500))
        requests, statuses = server.requests, server.statuses
    assert all(r["max_tokens"] == 1500 for r in requests) and statuses == [200, 200]
    told = _tool_texts(recorder)[0]
    assert "cut off at the output limit of 1500 tokens" in told and "escap" not in told
    assert "(not run, not charged)" in told
    assert result.trajectories[0].tool_calls == 1 and result.best is not None  # only submit was charged
    record = json.loads(requests[1]["messages"][2]["tool_calls"][0]["function"]["arguments"])
    assert record["arguments_received"].startswith('{"source": "import torch') and record["characters_received"]


# -- row 5: the history re-validated -------------------------------------------------------------
@pytest.mark.parametrize("server_kind", ["vllm_500", "vllm_400", "ollama"])
def test_the_history_stays_valid_json_for_servers_that_revalidate_it(seed1: Problem, server_kind: str) -> None:
    """vLLM ``json.loads`` every earlier call's arguments for the chat template (a failure is a 500
    in some versions, a 400 in others); Ollama unmarshals them ("invalid tool call arguments").
    A cut-off call, an object where a JSON string belongs, and garbage arguments are all kept as
    valid JSON objects."""
    script = [Reply(content="a", calls=(Call("compile", '{"source": "import tor'),), finish_reason="length"),
              Reply(content="b", calls=(Call("check_correctness", {"source": WRONG}, as_object=True),)),
              Reply(content="c", calls=(Call("benchmark", "source=FAST"), Call("tile_it", {"source": FAST}))),
              Reply(content="d", calls=(Call("submit", {"source": FAST}),))]
    server: FakeLLMServer = {"vllm_500": lambda: VLLMServer(script, history_status=500),
                              "vllm_400": lambda: VLLMServer(script, history_status=400),
                              "ollama": lambda: OllamaServer(script, context_window=16_384)}[server_kind]()
    with server:
        result, recorder = _run(seed1, server, _profile(server))
        statuses, requests = server.statuses, server.requests
    assert statuses == [200] * 4 and _arguments_are_json_objects(requests)
    assert result.trajectories[0].reason is StopReason.SUBMITTED and result.best is not None
    assert [a.tool for a in recorder.attempts] == ["check_correctness", "submit"]  # the object call ran
    assert result.trajectories[0].tool_calls == 2  # the cut, garbage and unknown calls cost nothing
    told = _tool_texts(recorder)
    assert "cut off at the output limit" in told[0] and "not valid JSON" in told[2]
    assert told[3].startswith("error: unknown tool 'tile_it'")


# -- row 6: context overflow in each server's words ----------------------------------------------
def _long_script(count: int) -> list[Reply]:
    script = [Reply(content=f"Variant {i}: unroll by {i}.", calls=(Call("compile", {"source": _source(i, 2600)}),))
              for i in range(count)]
    return [*script, Reply(content="Done.", calls=(Call("submit", {"source": FAST}),))]


OVERFLOW_SERVERS = {
    "openai": lambda s: OpenAIServer(s, context_window=9000),
    "vllm": lambda s: VLLMServer(s, context_window=9000, strict_roles=True),
    "sglang": lambda s: SGLangServer(s, context_window=9000),
    "llamacpp": lambda s: LlamaCppServer(s, context_window=9000),
    "llamacpp_legacy_wording": lambda s: LlamaCppServer(s, context_window=9000, legacy_wording=True),
}


@pytest.mark.parametrize("server_kind", sorted(OVERFLOW_SERVERS))
def test_context_overflow_is_recognised_in_each_servers_words(seed1: Problem, server_kind: str) -> None:
    """A profile that claims a larger window than the server was started with: the server's
    overflow error (OpenAI ``context_length_exceeded``; vLLM "This model's maximum context length
    is ..."; SGLang "The input (N tokens) is longer than the model's context length ..."/"Requested
    token count exceeds ..."; llama.cpp ``exceed_context_size_error``, with and without counts) is
    recognised, the history compacted once, and the job goes on. The vLLM server's template also
    demands strict alternation: no request may break it."""
    with OVERFLOW_SERVERS[server_kind](_long_script(9)) as server:
        profile = _profile(server, context_window=32_768, max_output_tokens=1024)
        result, recorder = _run(seed1, server, profile, budgets=budgets_of(turns=12))
        statuses, requests = server.statuses, server.requests
    assert result.trajectories[0].reason is StopReason.SUBMITTED and result.best is not None
    first = statuses.index(400)
    assert statuses[first + 1:] == [200] * (len(statuses) - first - 1)  # once learned, never again
    assert any("## Summary of this session so far" in (m.content or "") for m in recorder.messages)
    for request in requests:
        assert roles_alternate(request["messages"], allow_tools=True) is None


def test_strict_templates_without_tool_roles_get_alternating_text_histories(seed1: Problem) -> None:
    """A Llama-2/Gemma-style template (only user and assistant, alternating, else "Conversation roles
    must alternate user/assistant/user/assistant/...") on a vLLM without a tool parser: the job runs
    in the text protocol, through a nudge and a compaction, and no request breaks the template."""
    def text_call(i: int) -> Reply:
        return Reply(content=f"Variant {i}.\n```python\n{_source(i, 2600)}```\n"
                             '```json\n{"tool": "compile", "arguments": {}}\n```')
    script = [Reply(content="Let me think first."), *(text_call(i) for i in range(8)),
              Reply(content='```json\n{"tool": "submit", "arguments": {"source": ' + json.dumps(FAST) + "}}\n```")]
    with VLLMServer(script, tool_parser=False, strict_roles=True, template_tools=False,
                    context_window=9000) as server:
        result, recorder = _run(seed1, server, _profile(server, max_output_tokens=1024), budgets=budgets_of(turns=12))
        statuses, requests = server.statuses, server.requests
    assert result.trajectories[0].reason is StopReason.SUBMITTED and result.best is not None
    assert statuses[0] == 400 and set(statuses[1:]) == {200}  # tools refused once, then text only
    assert any("## Summary of this session so far" in (m.content or "") for m in recorder.messages)
    for request in requests[1:]:
        assert roles_alternate(request["messages"], allow_tools=False) is None


def test_the_history_fits_the_profiles_window_by_construction_even_where_the_server_would_truncate(
        seed1: Problem) -> None:
    """Ollama truncates a prompt longer than ``num_ctx`` silently (oldest messages first): with
    the window stated in the profile, it never has to, over a long job."""
    with OllamaServer(_long_script(12), context_window=8192) as server:
        result, _ = _run(seed1, server, _profile(server, max_output_tokens=1024), budgets=budgets_of(turns=14))
        truncated, exchanges = server.truncated, server.exchanges
    assert result.trajectories[0].reason is StopReason.SUBMITTED
    assert truncated == [0] * len(exchanges) and max(e.prompt_tokens for e in exchanges) + 1024 <= 8192


def test_every_servers_overflow_wording_is_recognised() -> None:
    assert is_context_overflow(400, "the input length exceeds the context length")  # Ollama
    assert is_context_overflow(400, "the prompt is longer than the context length currently available to the "
                               "model; shorten the prompt, adjust the context length in settings")  # Ollama
    assert not is_context_overflow(400, "Unsupported parameter: 'temperature' is not supported with this model.")
    assert not is_context_overflow(401, "This model's maximum context length is 8192 tokens")


# -- row 7: slow generations ---------------------------------------------------------------------
def test_a_long_generation_finishes_when_streamed_with_an_idle_timeout(seed1: Problem) -> None:
    """A reply that takes 3 s to generate, at 20 chunks a second: the idle timeout (1 s between
    chunks) never fires, though a whole-request timeout of 1 s would have."""
    slow = Reply(content="Thinking aloud. " * 180, calls=(Call("submit", {"source": FAST}),), chunk_delay_s=0.04)
    with VLLMServer([slow]) as server:
        started = time.monotonic()
        result, _ = _run(seed1, server, _profile(server, idle_timeout_s=1.0, timeout_s=1.0))
        elapsed, count = time.monotonic() - started, len(server.requests)
    assert result.trajectories[0].reason is StopReason.SUBMITTED and count == 1 and elapsed > 2.0


def test_abandoned_generations_are_estimated_and_counted(seed1: Problem) -> None:
    """Without streaming, a reply slower than the timeout is abandoned and retried: what the
    abandoned tries cost (the prompt the server read) is counted; when every try fails, it is
    recorded apart and the job fails with the endpoint's story."""
    quick = Reply(content="Done.", calls=(Call("submit", {"source": FAST}),))
    late = Reply(content="late", delay_s=1.2)
    with VLLMServer([late, quick]) as server:
        result, recorder = _run(seed1, server, _profile(server, stream=False, timeout_s=0.5))
        prompt = server.exchanges[1].prompt_tokens
    (turn,) = _assistant(recorder)
    assert result.best is not None and turn.tokens_in > prompt + 0.5 * prompt  # the abandoned try's prompt too

    with VLLMServer([late] * 3) as server:
        result, recorder = _run(seed1, server, _profile(server, stream=False, timeout_s=0.5, max_retries=2))
    assert result.failure is Failure.LLM_ERROR and "failed after 3 tries: no data for 0.5 s" in (result.error or "")
    assert len(recorder.usages) == 1 and recorder.usages[0].tokens_in > 3000
    assert result.totals.tokens_in == recorder.usages[0].tokens_in


# -- row 8: the wall clock -------------------------------------------------------------------------
def test_the_wall_clock_cuts_the_llm_call_in_flight_and_keeps_the_best(seed1: Problem) -> None:
    endless = Reply(content="and so on " * 2000, chunk_delay_s=0.02)  # ~40 s of streaming
    script = [Reply(content="first", calls=(Call("benchmark", {"source": FAST}),)), endless]
    with VLLMServer(script) as server:
        started = time.monotonic()
        result, recorder = _run(seed1, server, _profile(server), budgets=budgets_of(wall_clock_s=1.5))
        elapsed = time.monotonic() - started
        exchanges = server.exchanges
    assert result.reason is StopReason.WALL_CLOCK and elapsed < 4.0
    assert result.best is not None and result.best.source == FAST
    assert len(exchanges) == 2 and recorder.usages and recorder.usages[0].tokens_in > 3000  # the cut call counts


def test_the_wall_clock_cuts_the_evaluation_in_flight(seed1: Problem) -> None:
    evaluator = FakeEvaluator({SLOW: FakeCandidate()}, delay_s=30.0)
    with VLLMServer([Reply(content="go", calls=(Call("benchmark", {"source": SLOW}),))]) as server:
        started = time.monotonic()
        result, _ = _run(seed1, server, _profile(server), budgets=budgets_of(wall_clock_s=1.0), evaluator=evaluator)
        elapsed = time.monotonic() - started
    assert result.reason is StopReason.WALL_CLOCK and elapsed < 4.0 and evaluator.cancelled.is_set()
    assert result.failure is Failure.BUDGET and "wall clock budget (1 s) ran out" in (result.error or "")


def test_a_cancel_cuts_the_llm_call_in_flight(seed1: Problem) -> None:
    started = time.monotonic()
    recorder = MemoryRecorder(cancel_when=lambda _: time.monotonic() - started > 1.0)
    with VLLMServer([Reply(content="and so on " * 2000, chunk_delay_s=0.02)]) as server:
        result, _ = _run(seed1, server, _profile(server), recorder=recorder)
    assert result.reason is StopReason.CANCELLED and time.monotonic() - started < 4.0
    assert result.failure is Failure.CANCELLED


# -- streaming, Retry-After, budgets ------------------------------------------------------------------
STREAMING_SERVERS = {
    "openai": lambda s: OpenAIServer(s),
    "vllm": lambda s: VLLMServer(s),
    "sglang": lambda s: SGLangServer(s),
    "llamacpp": lambda s: LlamaCppServer(s),
    "ollama": lambda s: OllamaServer(s, context_window=16_384),
}


@pytest.mark.parametrize("server_kind", sorted(STREAMING_SERVERS))
def test_each_servers_stream_is_read_whole(seed1: Problem, server_kind: str) -> None:
    """Chunk formats differ: argument deltas (OpenAI, vLLM, SGLang, llama.cpp) or whole calls
    (Ollama); ``reasoning_content`` or ``reasoning`` (Ollama); usage in a chunk of its own (with
    ``include_usage``) or on the finishing chunk (llama.cpp). The calls, the reasoning and the
    server's own token counts all arrive."""
    script = [Reply(content="Two calls.", reasoning="why " * 50,
                    calls=(Call("check_correctness", {"source": WRONG}), Call("benchmark", {"source": FAST}))),
              Reply(content="Submit.", calls=(Call("submit", {"source": FAST}),))]
    with STREAMING_SERVERS[server_kind](script) as server:
        result, recorder = _run(seed1, server, _profile(server))
        exchanges = server.exchanges
    assert all(e.body["stream"] is True and e.body["stream_options"] == {"include_usage": True} for e in exchanges)
    assert [a.tool for a in recorder.attempts] == ["check_correctness", "benchmark"] and result.best is not None
    turns = _assistant(recorder)
    assert [t.tokens_in for t in turns] == [e.prompt_tokens for e in exchanges]
    if server_kind == "openai":
        assert turns[1].tokens_cached >= 1024  # the prefix the second request shared with the first


def test_retry_after_is_honoured(seed1: Problem) -> None:
    """OpenAI's 429 carries ``retry-after-ms`` and ``retry-after``; llama.cpp's 503 while the model
    loads carries none (exponential backoff)."""
    with OpenAIServer() as server:
        server.enqueue(server.rate_limited(0.25), Reply(content="ok", calls=(Call("submit", {"source": FAST}),)))
        sleeps: list[float] = []
        result, _ = _run(seed1, server, _profile(server), sleeps=sleeps)
        statuses = server.statuses
    assert statuses == [429, 200] and sleeps == [0.25] and result.best is not None

    with LlamaCppServer([Reply(content="ok", calls=(Call("submit", {"source": FAST}),))],
                        loading_requests=2) as server:
        sleeps = []
        result, _ = _run(seed1, server, _profile(server), sleeps=sleeps)
        statuses = server.statuses
    assert statuses == [503, 503, 200] and sleeps == [1.0, 2.0] and result.best is not None


def test_every_budget_is_shown_to_the_model(seed1: Problem) -> None:
    script = [Reply(content="a", calls=(Call("benchmark", {"source": SLOW}),)),
              Reply(content="b", calls=(Call("submit", {"source": FAST}),))]
    with VLLMServer(script) as server:
        budgets = budgets_of(turns=5, tool_calls=7, max_tokens=90_000, max_cost_usd=2.0, wall_clock_s=600)
        _run(seed1, server, _profile(server, price_in_per_mtok=1.0), budgets=budgets)
        requests = server.requests
    system = requests[0]["messages"][0]["content"]
    assert "5 turns" in system and "7 tool calls" in system and "90,000 tokens" in system
    assert "$2.00 of LLM cost" in system and "10 min of wall clock" in system
    line = requests[1]["messages"][-1]["content"].splitlines()[-1]
    assert line.startswith("[budget left: 4 turns, 6 tool calls, ") and "tokens, $" in line
    assert line.endswith("of wall clock]")


def test_streams_cut_by_the_client_leave_the_server_free(seed1: Problem) -> None:
    """The client closes a cut stream: the server sees the disconnect and stops generating."""
    started = time.monotonic()
    recorder = MemoryRecorder(cancel_when=lambda _: time.monotonic() - started > 0.8)
    with VLLMServer([Reply(content="and so on " * 2000, chunk_delay_s=0.02)]) as server:
        _run(seed1, server, _profile(server), recorder=recorder)
        deadline = time.monotonic() + 5
        while not server.exchanges[0].disconnected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.exchanges[0].disconnected
    assert threading.active_count() < 50


def test_the_source_hash_in_a_summary_names_the_attempt(seed1: Problem) -> None:
    """Compaction keeps older attempts as references the model can follow (hash and verdict)."""
    with VLLMServer(_long_script(9), context_window=9000) as server:
        result, recorder = _run(seed1, server, _profile(server, max_output_tokens=1024), budgets=budgets_of(turns=12))
    summary = next(m.content or "" for m in recorder.messages if "## Summary" in (m.content or ""))
    assert f"1. compile of source {source_sha256(_source(0, 2600))[:8]}: error (stage compile)" in summary
    assert "[first version]" in summary and "lines vs " in summary
    assert result.best is not None
