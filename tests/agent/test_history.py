"""`agent.history.History`: the window is kept by construction, compactions are rare and large."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from agent.feedback import AttemptNote
from agent.history import History, HistoryTooLong, SummaryFacts, parse_overflow_tokens


def _turn(i: int, source: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": f"turn {i}",
             "tool_calls": [{"id": f"c{i}", "type": "function",
                             "function": {"name": "compile", "arguments": json.dumps({"source": source})}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i} " + "r" * 400}]


def _history(window: int = 6000) -> History:
    history = History(window=window, reserve=1000)
    history.append({"role": "system", "content": "S" * 4000})
    history.append({"role": "user", "content": "P" * 800})
    return history


def test_overflow_counts_are_read_from_each_servers_words() -> None:
    assert parse_overflow_tokens("This model's maximum context length is 8192 tokens. However, your request has "
                                 "9100 input tokens. Please reduce the length of the input messages.") == (9100, 8192)
    assert parse_overflow_tokens("This model's maximum context length is 8192 tokens. However, you requested 9300 "
                                 "tokens (8300 in the messages, 1000 in the completion).") == (9300, 8192)
    assert parse_overflow_tokens("request (9100 tokens) exceeds the available context size (8192 tokens), try "
                                 "increasing it") == (9100, 8192)
    assert parse_overflow_tokens("The input (9100 tokens) is longer than the model's context length (8192 "
                                 "tokens).") == (9100, 8192)
    assert parse_overflow_tokens("the request exceeds the available context size, try increasing it") is None


def test_the_estimate_is_calibrated_by_the_largest_ratio_seen() -> None:
    history = _history()
    raw = history.raw_estimate()
    history.observe(prompt_tokens=2 * raw, raw_estimate=raw)
    assert history.factor == pytest.approx(2 * 1.05)
    history.observe(prompt_tokens=raw, raw_estimate=raw)  # a silently truncated prompt must not shrink it
    assert history.factor == pytest.approx(2 * 1.05)


def test_a_server_that_states_its_window_replaces_the_profiles() -> None:
    history = _history(window=32_768)
    history.overflowed("This model's maximum context length is 4096 tokens. However, your request has 5000 input "
                       "tokens.")
    assert history.window == 4096 and history.factor > 1.35


def test_compaction_keeps_the_head_alternates_and_shrinks_in_one_large_step() -> None:
    history = _history(window=7000)
    notes = []
    for i in range(8):
        for message in _turn(i, f"SOURCE{i} " + "s" * 1200):
            history.append(message)
        notes.append(AttemptNote("compile", "pass", "compile", source_sha256=f"{i:064x}", changed="first version"))
    assert not history.fits()
    before = history.tokens()
    summary = history.compact(SummaryFacts(notes=tuple(notes), latest_source="SOURCE7", latest_sha256="7" * 64))
    roles = [m["role"] for m in history.messages]
    assert roles[:2] == ["system", "user"] and roles[2] == "assistant"
    assert not any(a == b == "user" for a, b in itertools.pairwise(roles))
    assert history.messages[1]["content"].endswith(summary) and "8. compile of source 00000000" in summary
    assert history.tokens() < 0.75 * before and history.fits()
    assert history.messages[-2]["tool_calls"][0]["id"] == "c7"  # the latest turn is kept, with its result


def test_a_head_that_cannot_fit_is_refused() -> None:
    history = _history(window=2500)
    with pytest.raises(HistoryTooLong, match="the window leaves"):
        history.compact(SummaryFacts(notes=()))
