"""The provider seam: what the loop asks of an LLM and what it gets back.

A provider turns a chat history (OpenAI Chat Completions message dicts, the one canonical form
the loop keeps) and the tool schemas into one `AssistantTurn`. Exceptions, all `ProviderError`::

    ProviderError              the LLM could not answer (after the provider's own retries)
    └── ContextOverflow        the history is longer than the model's context: summarise, retry

Everything the model did wrong (bad JSON arguments, an unknown tool, no tool call, a refusal) is
*not* an exception: it comes back inside the turn and the loop feeds it back to the model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "AssistantTurn",
    "ContextOverflow",
    "LLMProvider",
    "ProviderError",
    "ToolCall",
    "Usage",
    "estimate_tokens",
    "parse_arguments",
]

Message = dict[str, Any]

#: Characters per token when an endpoint reports no usage (a rough English/code average).
CHARS_PER_TOKEN = 4


class ProviderError(RuntimeError):
    """The LLM endpoint failed for good (retries exhausted, auth, a bad request)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        self.status = status
        super().__init__(message if status is None else f"{message} (HTTP {status})")


class ContextOverflow(ProviderError):
    """The request does not fit the model's context window."""


@dataclass(frozen=True)
class Usage:
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class ToolCall:
    """One function call of an assistant turn, parsed as far as it could be.

    ``arguments`` is None when ``raw_arguments`` is not a JSON object; ``error`` then says why,
    in words meant for the model.
    """

    id: str
    name: str
    raw_arguments: str
    arguments: dict[str, Any] | None
    error: str | None = None

    def to_message(self) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry, exactly as the model sent it."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.raw_arguments}}


@dataclass(frozen=True)
class AssistantTurn:
    """What one LLM call produced."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    latency_ms: float = 0.0
    #: The provider's finish reason ("stop", "tool_calls", "length", ...), when it gives one.
    finish_reason: str | None = None
    #: The model declined (OpenAI's ``refusal`` field, or a text-mode refusal).
    refusal: str | None = None

    def to_message(self) -> Message:
        """The canonical assistant message kept in the history."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [c.to_message() for c in self.tool_calls]
        return message


@runtime_checkable
class LLMProvider(Protocol):
    """An LLM that answers a chat with tools. Implementations must be safe to call from threads."""

    def complete(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *,
                 temperature: float) -> AssistantTurn:
        """One assistant turn for this history.

        Raises:
            ContextOverflow: the history does not fit; the caller may shorten it and call again.
            ProviderError: the endpoint failed after retries.
        """
        ...


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A tool call's arguments as a dict, or None and the reason (for the model) why not."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return None, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        snippet = raw[max(0, exc.pos - 40): exc.pos + 40].replace("\n", "\\n")
        return None, (f"arguments are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}, "
                      f"near `{snippet}`); send the whole source as one JSON string with newlines and "
                      "quotes escaped")
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def estimate_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """A rough token count of a history (for usage when the endpoint reports none, and budgets)."""
    chars = 0
    for message in messages:
        chars += len(message.get("content") or "") + 16
        for call in message.get("tool_calls") or ():
            function = call.get("function", {})
            chars += len(function.get("name", "")) + len(function.get("arguments") or "") + 16
    return chars // CHARS_PER_TOKEN + 1
