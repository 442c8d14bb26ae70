"""Typed reads of the canonical chat messages (`agent.providers.base`): JSON towards the LLM."""

from __future__ import annotations

from agent.providers.base import ToolCall, call_function, message_calls, parse_arguments, text_field


def test_a_message_parts_read_with_their_types() -> None:
    call = ToolCall(id="c1", name="benchmark", raw_arguments='{"source": "x"}', arguments={"source": "x"})
    message = {"role": "assistant", "content": None, "tool_calls": [call.to_message(), "not an object", 3]}
    assert text_field(message, "role") == "assistant" and text_field(message, "content") is None
    (entry,) = message_calls(message)
    assert call_function(entry) == {"name": "benchmark", "arguments": '{"source": "x"}'}
    assert message_calls({"role": "user", "content": "hi"}) == [] and call_function({"id": "x"}) == {}
    assert text_field({"content": ["parts"]}, "content") is None


def test_arguments_are_a_json_object_or_a_reason() -> None:
    assert parse_arguments('{"source": "s", "n": [1, 2]}') == ({"source": "s", "n": [1, 2]}, None)
    assert parse_arguments({"n": (1, 2)}) == ({"n": [1, 2]}, None)  # a mapping of JSON, tuples as lists
    assert parse_arguments("") == ({}, None) and parse_arguments(None) == ({}, None)
    arguments, why = parse_arguments("[1]")
    assert arguments is None and why == "arguments must be a JSON object, got list"
    arguments, why = parse_arguments('{"source": "unterminated')
    assert arguments is None and why is not None and "not valid JSON" in why
