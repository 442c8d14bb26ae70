"""The provider seam: what the loop asks of an LLM and what it gets back.

A provider turns a chat history (OpenAI Chat Completions messages, the one canonical form the
loop keeps: JSON towards the LLM, a `Message`) and the tool schemas into one `AssistantTurn`;
`message_calls`, `call_function` and `text_field` read a message's parts with their types.
Exceptions, all `ProviderError`::

    ProviderError              the LLM could not answer (after the provider's own retries)
    ├── ContextOverflow        the history is longer than the model's context: shorten it, retry
    └── Interrupted            the caller's stop condition cut the call (wall clock, cancel)

Each carries the `Usage` the failed call is estimated to have cost (abandoned generations are
paid for too). Everything the model did wrong (bad JSON arguments, an unknown tool, no tool
call, a refusal) is *not* an exception: it comes back inside the turn for the loop to feed back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias, runtime_checkable

from vocabulary.wire import JsonObject, JsonValue, as_json

__all__ = [
    "AssistantTurn",
    "ContextOverflow",
    "Interrupted",
    "LLMProvider",
    "Message",
    "ProviderError",
    "ToolCall",
    "Usage",
    "call_function",
    "estimate_text_tokens",
    "estimate_tokens",
    "message_calls",
    "parse_arguments",
    "text_field",
]

#: A chat message (or a tool schema) in the Chat Completions form: JSON on its way to the LLM.
Message: TypeAlias = JsonObject

#: Characters per token when an endpoint reports no usage (a rough English/code average).
CHARS_PER_TOKEN = 4
#: Characters of malformed arguments kept in the history's record of a call that was not run.
INVALID_ARGUMENTS_KEPT = 200


@dataclass(frozen=True)
class Usage:
    """Tokens and cost of one or more LLM calls.

    ``tokens_cached`` is the part of ``tokens_in`` the server served from its prompt cache and
    ``tokens_reasoning`` the part of ``tokens_out`` spent on hidden reasoning; ``estimated`` says
    some of it was estimated (the server reported nothing: an abandoned or cut generation).
    """

    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    tokens_reasoning: int = 0
    tokens_cached: int = 0
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(tokens_in=self.tokens_in + other.tokens_in, tokens_out=self.tokens_out + other.tokens_out,
                     cost_usd=self.cost_usd + other.cost_usd,
                     tokens_reasoning=self.tokens_reasoning + other.tokens_reasoning,
                     tokens_cached=self.tokens_cached + other.tokens_cached,
                     estimated=self.estimated or other.estimated)

    @property
    def empty(self) -> bool:
        return not (self.tokens_in or self.tokens_out or self.cost_usd)


class ProviderError(RuntimeError):
    """The LLM endpoint failed for good (retries exhausted, auth, a bad request)."""

    def __init__(self, message: str, *, status: int | None = None, usage: Usage | None = None) -> None:
        self.status = status
        #: What the failed tries are estimated to have cost.
        self.usage = usage or Usage()
        self.detail = message
        super().__init__(message if status is None else f"{message} (HTTP {status})")


class ContextOverflow(ProviderError):
    """The request does not fit the model's context window."""


class Interrupted(ProviderError):
    """The caller's stop condition ended the call before the reply was complete."""


@dataclass(frozen=True)
class ToolCall:
    """One function call of an assistant turn, parsed as far as it could be.

    ``arguments`` is None when ``raw_arguments`` is not a JSON object; ``error`` then says why,
    in words meant for the model.
    """

    id: str
    name: str
    raw_arguments: str
    arguments: JsonObject | None
    error: str | None = None

    def to_message(self) -> JsonObject:
        """The OpenAI ``tool_calls`` entry kept in the history: its arguments always a JSON object.

        Servers re-read every earlier call's arguments as JSON (vLLM's chat-template preparation,
        Ollama's request conversion); a malformed or cut-off call is kept as a valid record of
        what was attempted instead (the model reads why in the call's tool message).
        """
        if self.arguments is not None:
            text = self.raw_arguments if _is_json_object(self.raw_arguments) else json.dumps(self.arguments)
        else:
            raw = self.raw_arguments
            kept = raw if len(raw) <= INVALID_ARGUMENTS_KEPT else raw[:INVALID_ARGUMENTS_KEPT] + "..."
            text = json.dumps({"not_run": self.error or "arguments were not a JSON object",
                               "arguments_received": kept, "characters_received": len(raw)})
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": text}}


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (TypeError, ValueError):
        return False


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
    #: The model's reasoning, as the server returned it apart (``reasoning_content``/``reasoning``).
    reasoning: str | None = None
    #: The reply was asked for (or fell back to) the text tool protocol.
    text_mode: bool = False
    #: The prompt tokens the server reported for the request that answered (``usage`` may add
    #: estimates of abandoned tries); ``None`` when it reported none.
    prompt_tokens: int | None = None

    def to_message(self, *, with_reasoning: bool = False) -> Message:
        """The canonical assistant message kept in the history."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [c.to_message() for c in self.tool_calls]
        if with_reasoning and self.reasoning:
            message["reasoning_content"] = self.reasoning
        return message


@runtime_checkable
class LLMProvider(Protocol):
    """An LLM that answers a chat with tools. Implementations must be safe to call from threads."""

    def complete(self, messages: Sequence[Mapping[str, JsonValue]], tools: Sequence[Mapping[str, JsonValue]], *,
                 temperature: float, text_tools: bool = False,
                 should_stop: Callable[[], bool] | None = None) -> AssistantTurn:
        """One assistant turn for this history.

        Args:
            messages: the history (canonical form).
            tools: the tool schemas.
            temperature: the sampling temperature (a profile may omit it).
            text_tools: describe the tools in the prompt and parse calls from the text.
            should_stop: polled while the call runs; once true the call is given up (`Interrupted`).

        Raises:
            ContextOverflow: the history does not fit; the caller may shorten it and call again.
            Interrupted: ``should_stop`` became true.
            ProviderError: the endpoint failed after retries.
        """
        ...


def text_field(message: Mapping[str, JsonValue], key: str) -> str | None:
    """A message's string field (``role``, ``content``, ``tool_call_id`` …), None if absent or not a string."""
    value = message.get(key)
    return value if isinstance(value, str) else None


def message_calls(message: Mapping[str, JsonValue]) -> list[Mapping[str, JsonValue]]:
    """An assistant message's ``tool_calls`` entries (those that are objects)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list | tuple):
        return []
    return [call for call in calls if isinstance(call, Mapping)]


def call_function(call: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
    """A ``tool_calls`` entry's ``function`` object (``name``, ``arguments``); empty if it has none."""
    function = call.get("function")
    return function if isinstance(function, Mapping) else {}


def parse_arguments(raw: object) -> tuple[JsonObject | None, str | None]:
    """A tool call's arguments as a JSON object, or None and the reason (for the model) why not."""
    if isinstance(raw, Mapping):
        return {str(k): as_json(v) for k, v in raw.items()}, None
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
    return {str(k): as_json(v) for k, v in value.items()}, None


def estimate_tokens(messages: Sequence[Mapping[str, JsonValue]], tools: Sequence[Mapping[str, JsonValue]] = ()) -> int:
    """A rough token count of a history and its tool schemas (for usage when the endpoint
    reports none, and for fitting the window: the loop calibrates it against reported usage)."""
    chars = 0
    for message in messages:
        content = message.get("content")
        chars += len(content if isinstance(content, str) else json.dumps(content or "")) + 16
        chars += len(text_field(message, "reasoning_content") or "")
        for call in message_calls(message):
            function = call_function(call)
            chars += len(text_field(function, "name") or "") + len(str(function.get("arguments") or "")) + 16
    if tools:
        chars += len(json.dumps(list(tools)))
    return chars // CHARS_PER_TOKEN + 1


def estimate_text_tokens(text: str | None) -> int:
    """A rough token count of one piece of generated text."""
    return len(text or "") // CHARS_PER_TOKEN
