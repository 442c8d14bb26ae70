"""Tool calls for endpoints without function calling: described in the prompt, parsed from text.

The model answers with fenced blocks::

    ```python
    ...the complete candidate file...
    ```
    ```json
    {"tool": "benchmark", "arguments": {}}
    ```

A call whose tool takes ``source`` and whose arguments have none gets the last ``python`` block of
the same message (escaping a whole file inside JSON is where such models fail most). The history
the loop keeps stays in the canonical tool-call form; `to_text_messages` rewrites it on the way out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from agent.providers.base import Message, ToolCall, call_function, message_calls, parse_arguments, text_field
from vocabulary.wire import JsonValue

__all__ = ["parse_text_tool_calls", "render_tool_instructions", "to_text_messages"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_TOOL_NAME = re.compile(r'"(?:tool|name)"\s*:\s*"([^"]+)"')


def _properties(function: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
    """A tool schema's parameter properties (empty if it has none)."""
    parameters = function.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def _tools_taking_source(tools: Sequence[Mapping[str, JsonValue]]) -> set[str]:
    names = set()
    for tool in tools:
        function = call_function(tool)
        if "source" in _properties(function):
            names.add(text_field(function, "name") or "")
    return names


def render_tool_instructions(tools: Sequence[Mapping[str, JsonValue]]) -> str:
    """The tool protocol for a model that cannot call functions natively."""
    lines = [
        "## Calling tools (this endpoint has no native function calling)",
        "Call a tool by ending your message with a fenced JSON block:",
        '```json\n{"tool": "<name>", "arguments": {...}}\n```',
        "For tools that take `source`, put the complete candidate file in a ```python block in the same "
        "message and leave `source` out of the JSON: the last python block is used. Several JSON blocks "
        "make several calls, run in order. Results come back in the next user message.",
        "Tools:",
    ]
    for tool in tools:
        function = call_function(tool)
        signature = ", ".join(_properties(function))
        lines.append(f"- {function.get('name')}({signature}): {function.get('description', '')}")
    return "\n".join(lines)


def parse_text_tool_calls(content: str | None, tools: Sequence[Mapping[str, JsonValue]], *,
                          id_prefix: str) -> tuple[ToolCall, ...]:
    """The tool calls written as fenced JSON blocks in ``content``, in order."""
    if not content:
        return ()
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(content)]
    python_blocks = [body for lang, body in blocks if lang in ("python", "py")]
    needs_source = _tools_taking_source(tools)
    calls: list[ToolCall] = []
    for lang, body in blocks:
        if lang not in ("json", "tool", ""):
            continue
        text = body.strip()
        if not text.startswith("{") or not _TOOL_NAME.search(text):
            continue
        call_id = f"{id_prefix}-{len(calls)}"
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            match = _TOOL_NAME.search(text)
            name = match.group(1) if match else "?"
            _, error = parse_arguments(text)
            calls.append(ToolCall(id=call_id, name=name, raw_arguments=text, arguments=None,
                                  error=f"the JSON block is not valid: {error}"))
            continue
        if not isinstance(value, dict):
            continue
        name = str(value.get("tool") or value.get("name") or "")
        arguments, error = parse_arguments(value.get("arguments", {}))
        if arguments is not None and name in needs_source and "source" not in arguments and python_blocks:
            arguments = {**arguments, "source": python_blocks[-1]}
        raw = json.dumps(arguments) if arguments is not None else json.dumps(value.get("arguments"))
        calls.append(ToolCall(id=call_id, name=name, raw_arguments=raw, arguments=arguments, error=error))
    return tuple(calls)


def _render_call(call: Mapping[str, JsonValue]) -> str:
    function = call_function(call)
    arguments, _ = parse_arguments(function.get("arguments"))
    shown = {k: ("<the python block above>" if k == "source" else v) for k, v in (arguments or {}).items()}
    return "```json\n" + json.dumps({"tool": function.get("name"), "arguments": shown}) + "\n```"


def to_text_messages(messages: Sequence[Mapping[str, JsonValue]],
                     tools: Sequence[Mapping[str, JsonValue]]) -> list[Message]:
    """The canonical history rewritten for an endpoint that knows only system/user/assistant text."""
    names: dict[str, str] = {}
    out: list[Message] = []
    instructions = render_tool_instructions(tools)
    system_done = False
    for message in messages:
        role = message.get("role")
        content = text_field(message, "content") or ""
        if role == "system" and not system_done:
            out.append({"role": "system", "content": f"{content}\n\n{instructions}"})
            system_done = True
        elif role == "assistant":
            calls = message_calls(message)
            for call in calls:
                names[text_field(call, "id") or ""] = text_field(call_function(call), "name") or "?"
            if calls and "```json" not in content:
                content = "\n".join([content, *(_render_call(c) for c in calls)]).strip()
            out.append({"role": "assistant", "content": content})
        elif role == "tool":
            call_id = text_field(message, "tool_call_id") or ""
            text = f"Result of {names.get(call_id, 'the tool call')} ({call_id}):\n{content}"
            previous = text_field(out[-1], "content") if out and out[-1]["role"] == "user" else None
            if previous is not None and previous.startswith("Result of "):
                out[-1] = {"role": "user", "content": previous + "\n\n" + text}
            else:
                out.append({"role": "user", "content": text})
        else:
            out.append({"role": role, "content": content})
    if not system_done:
        out.insert(0, {"role": "system", "content": instructions})
    return out
