"""The loop against a fake evaluator: ordering, budgets, dedup, infra, best-of, failures as values."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agent import Failure, JobSpec, StopReason, run_job, source_sha256
from agent.providers.base import AssistantTurn, ContextOverflow, ProviderError, ToolCall, Usage
from agent.providers.scripted import ScriptedCall, ScriptedProvider, ScriptedTurn
from problems.spec import Problem
from tests.support.agents import SCRIPTED, FakeClock, budgets_of, fake_for, no_sleep, spec_for
from tests.support.doubles import FakeCandidate, FakeEvaluator, MemoryRecorder


def test_scripted_job_records_every_message_and_attempt_in_order(seed1: Problem, scripted1: ScriptedProvider,
                                                               recorder: MemoryRecorder) -> None:
    evaluator = fake_for(scripted1)
    result = run_job(spec_for(seed1), evaluator=evaluator, recorder=recorder, provider=scripted1, sleep=no_sleep)

    assert result.reason is StopReason.COMPLETED and result.error is None
    assert recorder.finished == {0: "submitted"} and result.trajectories[0].reason is StopReason.SUBMITTED
    roles = [m.role for m in recorder.messages]
    assert roles[:2] == ["system", "user"]
    assert roles[2:] == ["assistant", "tool"] * 3 + ["assistant", "tool", "tool"] + ["assistant", "tool"] * 3
    assistants = [m for m in recorder.messages if m.role == "assistant"]
    assert all(m.tokens_in > 0 and m.tokens_out > 0 for m in assistants)
    # each tool result answers the call before it
    calls = [c["id"] for m in assistants for c in (m.tool_calls or [])]
    assert [m.tool_call_id for m in recorder.messages if m.role == "tool"] == calls
    # attempts: every code-running call once; submit reuses the benchmark verdict
    assert [a.tool for a in recorder.attempts] == ["compile", "check_correctness", "check_correctness", "benchmark",
                                                   "benchmark", "profile"]
    assert len(evaluator.calls) == 6 and result.totals.evaluations == 6
    # parents: each new source derives from the previous one; a re-run of a source is its own
    # earlier attempt's (issue 24: it named the attempt its first run was edited from)
    draft, wrong, slow, rerun, fast, profile = recorder.attempts
    assert draft.parent_sha256 is None and wrong.parent_sha256 == draft.sha256
    assert slow.parent_sha256 == wrong.sha256 and rerun.sha256 == slow.sha256 and rerun.parent_sha256 == slow.sha256
    assert fast.parent_sha256 == slow.sha256 and profile.parent_sha256 == fast.sha256
    # the best is the fast kernel's benchmark verdict, with its source
    assert result.best is not None and result.best.source == scripted1.source("fast")
    assert result.best.median_ms == 1.0 and result.best.tool == "benchmark"
    assert result.totals.llm_calls == 7 and result.totals.tool_calls == 8
    assert "(identical source to an earlier benchmark call" in recorder.tool_results()[-1]


def test_turn_budget_cuts_the_script_and_the_best_still_counts(seed1: Problem, scripted1: ScriptedProvider,
                                                               recorder: MemoryRecorder) -> None:
    result = run_job(spec_for(seed1, budgets=budgets_of(turns=5)), evaluator=fake_for(scripted1), recorder=recorder,
                     provider=scripted1, sleep=no_sleep)
    assert result.trajectories[0].reason is StopReason.TURNS and recorder.finished == {0: "turns"}
    assert sum(m.role == "assistant" for m in recorder.messages) == 5
    assert "submit" not in [a.tool for a in recorder.attempts]
    assert result.best is not None and result.best.source == scripted1.source("fast")  # ended without submit
    assert "Your next turn is the last: submit(source)" in recorder.tool_results()[-2]
    assert "[budget used up: the session ends here" in recorder.tool_results()[-1]


def test_tool_call_budget(seed1: Problem, scripted1: ScriptedProvider, recorder: MemoryRecorder) -> None:
    result = run_job(spec_for(seed1, budgets=budgets_of(tool_calls=4)), evaluator=fake_for(scripted1),
                     recorder=recorder, provider=scripted1, sleep=no_sleep)
    assert result.trajectories[0].reason is StopReason.TOOL_CALLS
    assert result.trajectories[0].tool_calls == 4
    # turn 4 calls check_correctness then benchmark: the second is answered, not run
    assert recorder.tool_results()[-1] == "not run: the session ended (tool_calls)"
    assert [a.tool for a in recorder.attempts][-1] == "check_correctness"


def test_job_budgets_tokens_cost_wall_clock(seed1: Problem, scripted1: ScriptedProvider) -> None:
    result = run_job(spec_for(seed1, budgets=budgets_of(max_tokens=9000)), evaluator=fake_for(scripted1),
                     recorder=MemoryRecorder(), provider=scripted1, sleep=no_sleep)
    assert result.reason is StopReason.TOKENS and result.totals.tokens >= 9000
    assert result.totals.llm_calls < 7

    class Priced(ScriptedProvider):
        def complete(self, *args: Any, **kw: Any) -> AssistantTurn:
            turn = super().complete(*args, **kw)
            return AssistantTurn(content=turn.content, tool_calls=turn.tool_calls,
                                 usage=Usage(turn.usage.tokens_in, turn.usage.tokens_out, cost_usd=0.4))

    priced = Priced(scripted1.turns, scripted1.sources)
    result = run_job(spec_for(seed1, budgets=budgets_of(max_cost_usd=1.0)), evaluator=fake_for(scripted1),
                     recorder=MemoryRecorder(), provider=priced, sleep=no_sleep)
    assert result.reason is StopReason.COST and result.totals.llm_calls == 3
    assert result.totals.cost_usd == pytest.approx(1.2)

    clock = FakeClock()

    class Slow(ScriptedProvider):
        def complete(self, *args: Any, **kw: Any) -> AssistantTurn:
            clock.now += 100.0
            return super().complete(*args, **kw)

    result = run_job(spec_for(seed1, budgets=budgets_of(wall_clock_s=250)), evaluator=fake_for(scripted1),
                     recorder=MemoryRecorder(), provider=Slow(scripted1.turns, scripted1.sources), sleep=no_sleep,
                     clock=clock)
    assert result.reason is StopReason.WALL_CLOCK and result.totals.llm_calls == 3


def test_target_speedup_stops_the_job_early(seed1: Problem, scripted1: ScriptedProvider,
                                            recorder: MemoryRecorder) -> None:
    result = run_job(spec_for(seed1, budgets=budgets_of(target_speedup=1.5)), evaluator=fake_for(scripted1),
                     recorder=recorder, provider=scripted1, sleep=no_sleep)
    assert result.reason is StopReason.TARGET_REACHED  # the fast one is 2x over eager
    assert [a.tool for a in recorder.attempts][-1] == "benchmark" and result.best is not None


def test_cancellation_is_checked_between_steps(seed1: Problem, scripted1: ScriptedProvider) -> None:
    recorder = MemoryRecorder(cancel_when=lambda r: len(r.attempts) >= 2)
    result = run_job(spec_for(seed1), evaluator=fake_for(scripted1), recorder=recorder, provider=scripted1,
                     sleep=no_sleep)
    assert result.reason is StopReason.CANCELLED and recorder.finished == {0: "cancelled"}
    assert len(recorder.attempts) == 2


def test_suspicious_never_becomes_best_but_is_reported(seed1: Problem, scripted1: ScriptedProvider) -> None:
    evaluator = fake_for(scripted1, fast=FakeCandidate("suspicious", median_ms=0.1))
    result = run_job(spec_for(seed1), evaluator=evaluator, recorder=MemoryRecorder(), provider=scripted1,
                     sleep=no_sleep)
    assert result.best is not None and result.best.source == scripted1.source("slow")
    assert [q.source for q in result.quarantined] == [scripted1.source("fast")]


def test_correctness_only_passes_never_count_as_best(seed1: Problem) -> None:
    turns = (ScriptedTurn("check", (ScriptedCall("check_correctness", "fast"),)),
             ScriptedTurn("compile", (ScriptedCall("compile", "fast"),)))
    provider = ScriptedProvider(turns, {"fast": "FAST"})
    result = run_job(spec_for(seed1, budgets=budgets_of(turns=2)), evaluator=FakeEvaluator({"FAST": FakeCandidate()}),
                     recorder=MemoryRecorder(), provider=provider, sleep=no_sleep)
    assert result.best is None and result.reason is StopReason.COMPLETED


def test_infra_errors_are_retried_recorded_and_never_shown(seed1: Problem, scripted1: ScriptedProvider,
                                                           recorder: MemoryRecorder) -> None:
    sleeps: list[float] = []
    evaluator = fake_for(scripted1, wrong=FakeCandidate("wrong", infra_first=2))
    run_job(spec_for(seed1), evaluator=evaluator, recorder=recorder, provider=scripted1, sleep=sleeps.append)
    infra = [a for a in recorder.attempts if a.verdict.error_kind == "infra"]
    assert len(infra) == 2 and sleeps == [2.0, 10.0]
    assert not any("reference process failed" in t for t in recorder.tool_results())
    wrong_result = recorder.tool_results()[2]
    assert wrong_result.startswith("check_correctness: FAIL")


def test_persistent_infra_failure_is_not_charged_and_ends_the_trajectory(seed1: Problem,
                                                                         scripted1: ScriptedProvider) -> None:
    evaluator = fake_for(scripted1, draft=FakeCandidate("compile_error", infra_first=100))
    turns = (scripted1.turns[1],) * 4
    provider = ScriptedProvider(turns, scripted1.sources)
    recorder = MemoryRecorder()
    result = run_job(spec_for(seed1), evaluator=evaluator, recorder=recorder, provider=provider, sleep=no_sleep)
    trajectory = result.trajectories[0]
    assert trajectory.reason is StopReason.INFRA_ERROR and result.reason is StopReason.INFRA_ERROR
    assert trajectory.tool_calls == 0 and trajectory.turns == 3
    assert all("problem on our side (not your code)" in t for t in recorder.tool_results())
    assert len(recorder.attempts) == 9  # 3 turns x (1 try + 2 retries)


def test_device_specs_retried_then_in_the_prompt(seed1: Problem, scripted1: ScriptedProvider,
                                                 recorder: MemoryRecorder) -> None:
    evaluator = fake_for(scripted1)
    evaluator._specs_failures = 1
    run_job(spec_for(seed1), evaluator=evaluator, recorder=recorder, provider=scripted1, sleep=no_sleep)
    assert "NVIDIA H200" in (recorder.messages[0].content or "")
    assert "ridge point" in recorder.tool_results()[0]


def test_dedup_serves_stored_verdicts_across_tools(seed1: Problem) -> None:
    turns = (
        ScriptedTurn("bench", (ScriptedCall("benchmark", "fast"),)),
        ScriptedTurn("again", (ScriptedCall("check_correctness", "fast"), ScriptedCall("compile", "fast"),
                               ScriptedCall("benchmark", "fast"))),
        ScriptedTurn("broken", (ScriptedCall("compile", "broken"),)),
        ScriptedTurn("broken deeper", (ScriptedCall("benchmark", "broken"), ScriptedCall("profile", "fast"))),
    )
    provider = ScriptedProvider(turns, {"fast": "FAST", "broken": "BROKEN"})
    evaluator = FakeEvaluator({"FAST": FakeCandidate(), "BROKEN": FakeCandidate("compile_error")})
    recorder = MemoryRecorder()
    run_job(spec_for(seed1), evaluator=evaluator, recorder=recorder, provider=provider, sleep=no_sleep)
    assert evaluator.calls == [("FAST", "benchmark"), ("BROKEN", "compile"), ("FAST", "profile")]
    results = recorder.tool_results()
    assert "identical source to an earlier benchmark call" in results[1]
    assert "identical source to an earlier compile call" in results[5]


def test_malformed_calls_unknown_tools_and_missing_source_are_fed_back(seed1: Problem) -> None:
    turns = (
        ScriptedTurn("bad json", (ScriptedCall("compile", raw_arguments='{"source": "import torch\n'),)),
        ScriptedTurn("unknown", (ScriptedCall("run_kernel", "fast"), ScriptedCall("benchmark", raw_arguments="{}"),
                                 ScriptedCall("compile", raw_arguments=json.dumps({"source": "x", "flags": 1})))),
        ScriptedTurn("fine", (ScriptedCall("submit", "fast"),)),
    )
    provider = ScriptedProvider(turns, {"fast": "FAST"})
    recorder = MemoryRecorder()
    result = run_job(spec_for(seed1), evaluator=FakeEvaluator({"FAST": FakeCandidate()}), recorder=recorder,
                     provider=provider, sleep=no_sleep)
    results = recorder.tool_results()
    assert results[0].startswith("error: compile: arguments are not valid JSON")
    assert results[1].startswith("error: unknown tool 'run_kernel'") and "check_correctness" in results[1]
    assert results[2].startswith("error: benchmark needs `source`")
    assert results[3].startswith("error: compile takes only `source`")
    assert result.trajectories[0].reason is StopReason.SUBMITTED and result.best is not None


class ScriptProvider:
    """Returns turns or raises errors from a list; records the histories it was sent."""

    def __init__(self, steps: Sequence[AssistantTurn | Exception]) -> None:
        self.steps = list(steps)
        self.seen: list[list[dict[str, Any]]] = []
        self.lock = threading.Lock()

    def complete(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *,
                 temperature: float, **_: Any) -> AssistantTurn:
        with self.lock:
            self.seen.append([dict(m) for m in messages])
            step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def _call(name: str, source: str | None = None, call_id: str = "c") -> ToolCall:
    args = {"source": source} if source is not None else {}
    return ToolCall(id=call_id, name=name, raw_arguments=json.dumps(args), arguments=args)


def test_no_tool_call_refusal_and_truncation_are_nudged(seed1: Problem, recorder: MemoryRecorder) -> None:
    provider = ScriptProvider([
        AssistantTurn(content="Let me think about it."),
        AssistantTurn(content=None, refusal="I can't help with that."),
        AssistantTurn(content="```python\nclass ModelNew", finish_reason="length"),
        AssistantTurn(content="ok", tool_calls=(_call("submit", "FAST"),)),
    ])
    result = run_job(spec_for(seed1), evaluator=FakeEvaluator({"FAST": FakeCandidate()}), recorder=recorder,
                     provider=provider, sleep=no_sleep)
    users = [m.content or "" for m in recorder.messages if m.role == "user"][1:]
    assert users[0].startswith("Your message had no tool call")
    assert "[budget left: 9 turns, 30 tool calls, 400,000 tokens" in users[0]
    assert users[1].startswith("You declined (I can't help with that.)")
    assert users[2].startswith("Your message was cut off")
    assert result.trajectories[0].reason is StopReason.SUBMITTED and result.trajectories[0].turns == 4


def _roles_alternate(messages: Sequence[Mapping[str, Any]]) -> bool:
    roles = [m["role"] for m in messages]
    return not any(a == b == "user" for a, b in itertools.pairwise(roles))


def test_context_overflow_compacts_and_retries_once(seed1: Problem, recorder: MemoryRecorder) -> None:
    """A server that refuses without saying its window: the messages must shrink by a fifth at least."""
    provider = ScriptProvider([
        *(AssistantTurn(content="x" * 3000, tool_calls=(_call("compile", f"SRC{i}", f"c{i}"),)) for i in range(5)),
        AssistantTurn(content="a", tool_calls=(_call("benchmark", "FAST", "c5"),)),
        ContextOverflow("the request exceeds the available context size, try increasing it", status=400),
        AssistantTurn(content="b", tool_calls=(_call("submit", "FAST", "c6"),)),
    ])
    result = run_job(spec_for(seed1), evaluator=FakeEvaluator({"FAST": FakeCandidate()}), recorder=recorder,
                     provider=provider, sleep=no_sleep)
    assert result.trajectories[0].reason is StopReason.SUBMITTED
    refused, retried = provider.seen[6], provider.seen[7]
    assert len(json.dumps(retried)) < 0.8 * len(json.dumps(refused))
    # the summary rides on the problem message: never two user messages in a row
    assert [m["role"] for m in retried] == ["system", "user", "assistant", "tool"] and _roles_alternate(retried)
    summary = retried[1]["content"]
    assert summary.startswith(provider.seen[0][1]["content"]) and "## Summary of this session so far" in summary
    sha = source_sha256("FAST")[:8]
    assert f"6. benchmark of source {sha}: pass (stage done), 1.000 ms, 2.00x vs eager" in summary
    assert "```python\nFAST\n```" in summary  # the best source stays verbatim
    assert retried[2]["tool_calls"][0]["id"] == "c5"  # the latest turn is kept with its result
    assert any("## Summary of this session so far" in (m.content or "") for m in recorder.messages)


def test_context_overflow_twice_fails_the_trajectory_with_the_servers_words(seed1: Problem) -> None:
    provider = ScriptProvider([ContextOverflow("too long"), ContextOverflow("still too long")])
    result = run_job(spec_for(seed1), evaluator=FakeEvaluator({}), recorder=MemoryRecorder(), provider=provider,
                     sleep=no_sleep)
    assert result.reason is StopReason.CONTEXT_OVERFLOW and result.failure is Failure.CONTEXT
    assert "the server said: too long" in (result.error or "")


def test_long_history_is_compacted_before_it_is_sent_and_never_over_the_window(seed1: Problem) -> None:
    steps: list[AssistantTurn | Exception] = [
        AssistantTurn(content="x" * 2000, tool_calls=(_call("compile", f"SRC{i}" + "y" * 1500, f"c{i}"),))
        for i in range(12)]
    provider = ScriptProvider(steps)
    llm = SCRIPTED.model_copy(update={"max_output_tokens": 1000})
    spec = spec_for(seed1, budgets=budgets_of(turns=12), context_tokens=14_000, llm=llm)
    run_job(spec, evaluator=FakeEvaluator({}), recorder=MemoryRecorder(), provider=provider, sleep=no_sleep)
    compacted = [h for h in provider.seen if "## Summary of this session so far" in h[1]["content"]]
    assert compacted and len(compacted) < len(provider.seen)
    for history in provider.seen:  # the estimate (3 characters a token, a pessimistic guess) always fits
        assert len(json.dumps(history)) / 3 + 1000 < 14_000
        assert _roles_alternate(history)
    first = compacted[0]  # as the compaction left it
    assert sum(m["role"] == "assistant" for m in first) >= 2
    # older sources in kept turns are references; the latest one stays verbatim
    sources = [json.loads(c["function"]["arguments"])["source"] for m in first if m["role"] == "assistant"
               for c in m["tool_calls"]]
    assert sources[-1].startswith("SRC") and all(s.startswith("[source ") for s in sources[:-1])


def test_provider_failures_end_the_trajectory_as_values(seed1: Problem) -> None:
    result = run_job(spec_for(seed1), evaluator=FakeEvaluator({}), recorder=MemoryRecorder(),
                     provider=ScriptProvider([ProviderError("the endpoint refused", status=401)]), sleep=no_sleep)
    assert result.reason is StopReason.LLM_ERROR and "401" in (result.error or "")

    recorder = MemoryRecorder()
    result = run_job(spec_for(seed1), evaluator=FakeEvaluator({}), recorder=recorder,
                     provider=ScriptProvider([KeyError("bug")]), sleep=no_sleep)
    assert result.reason is StopReason.INTERNAL_ERROR and "KeyError" in (result.error or "")
    assert recorder.finished == {0: "internal_error"}


def test_trajectories_run_concurrently_share_dedup_and_pick_the_best(seed1: Problem,
                                                                     scripted1: ScriptedProvider) -> None:
    evaluator = fake_for(scripted1)
    recorder = MemoryRecorder()
    result = run_job(spec_for(seed1, trajectories=3), evaluator=evaluator, recorder=recorder, provider=scripted1,
                     sleep=no_sleep)
    assert set(recorder.finished.values()) == {"submitted"} and len(result.trajectories) == 3
    assert [recorder.started[i].temperature for i in range(3)] == [0.2, 0.7, 0.9]
    assert recorder.started[1].strategy.startswith("vendor_plus_epilogue: Keep the vendor library")
    strategies = {m.content for m in recorder.messages if m.role == "system"}
    assert any("## Strategy for this session" in (s or "") for s in strategies)
    # the same script in every trajectory: each (source, depth) evaluated once in the whole job
    assert len(evaluator.calls) == len(set(evaluator.calls)) == 6
    assert result.best is not None and result.best.source == scripted1.source("fast")
    for i in range(3):
        assert [m.role for m in recorder.messages_of(i)][:2] == ["system", "user"]


def test_job_spec_and_budgets_validate() -> None:
    with pytest.raises(ValueError, match="turns"):
        budgets_of(turns=0)
    with pytest.raises(ValueError, match="target_speedup"):
        budgets_of(target_speedup=0)
    with pytest.raises(ValueError, match="target"):
        JobSpec(problem=None, target="tpu", llm=None, budgets=budgets_of())  # type: ignore[arg-type]
    assert StopReason.TURNS.outcome == "exhausted" and StopReason.LLM_ERROR.outcome == "failed"
    assert StopReason.SUBMITTED.outcome == "submitted"
