"""Tool calls for endpoints without function calling: prompt text out, fenced JSON in."""

from __future__ import annotations

import json
from typing import Any

from agent.providers.textcalls import parse_text_tool_calls, render_tool_instructions, to_text_messages
from agent.tools import TOOL_SCHEMAS


def test_json_block_with_the_source_in_a_python_block() -> None:
    content = ("Plan: pool first.\n```python\nclass ModelNew:\n    pass\n```\n"
               '```json\n{"tool": "benchmark", "arguments": {}}\n```')
    (call,) = parse_text_tool_calls(content, TOOL_SCHEMAS, id_prefix="t")
    assert call.name == "benchmark" and call.error is None
    assert call.arguments == {"source": "class ModelNew:\n    pass\n"}
    assert json.loads(call.raw_arguments) == call.arguments and call.id == "t-0"


def test_several_calls_explicit_source_and_name_key() -> None:
    content = ('```json\n{"tool": "get_gpu_specs"}\n```\ntext\n'
               '```json\n{"name": "compile", "arguments": {"source": "x = 1"}}\n```')
    calls = parse_text_tool_calls(content, TOOL_SCHEMAS, id_prefix="t")
    assert [c.name for c in calls] == ["get_gpu_specs", "compile"]
    assert calls[0].arguments == {} and calls[1].arguments == {"source": "x = 1"}


def test_bad_json_becomes_an_error_call_and_prose_is_ignored() -> None:
    content = '```json\n{"tool": "compile", "arguments": {"source": "unterminated}\n```\n```json\n[1, 2]\n```'
    (call,) = parse_text_tool_calls(content, TOOL_SCHEMAS, id_prefix="t")
    assert call.name == "compile" and call.arguments is None and "not valid" in (call.error or "")
    assert parse_text_tool_calls("I think we should pool first.", TOOL_SCHEMAS, id_prefix="t") == ()
    assert parse_text_tool_calls(None, TOOL_SCHEMAS, id_prefix="t") == ()


def test_history_rewritten_for_a_text_only_endpoint() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "P"},
        {"role": "assistant", "content": "go", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "compile", "arguments": '{"source": "x"}'}},
            {"id": "b", "type": "function", "function": {"name": "benchmark", "arguments": '{"source": "x"}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": "compiled"},
        {"role": "tool", "tool_call_id": "b", "content": "1.0 ms"},
    ]
    out = to_text_messages(messages, TOOL_SCHEMAS)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("S\n\n## Calling tools") and "- benchmark(source)" in out[0]["content"]
    assert '"tool": "compile"' in out[2]["content"] and "<the python block above>" in out[2]["content"]
    assert "Result of compile (a):\ncompiled" in out[3]["content"] and "Result of benchmark (b)" in out[3]["content"]
    assert all("tool_calls" not in m for m in out)
    assert "get_gpu_specs()" in render_tool_instructions(TOOL_SCHEMAS)
