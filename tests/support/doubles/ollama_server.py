"""A fake server that answers as Ollama's OpenAI-compatible endpoint (``/v1``) does.

Reproduced (Ollama sources: openai/openai.go ``NewError``, ``FromCompletionToolCall``,
``ToStreamChunks``, ``FinishChunk``; middleware/openai.go ``ChatMiddleware``; server/prompt.go and
server/routes.go, the prompt's truncation to ``num_ctx``; server/images.go ``errCapabilities``):

- errors as ``{"error": {"message", "type": "invalid_request_error"|"api_error", "param": null,
  "code": null}}``;
- the history's tool-call arguments are unmarshalled into an object: anything else is 400
  "invalid tool call arguments";
- a prompt longer than ``num_ctx`` is truncated silently, oldest messages first (the system
  message kept); only when the last message alone does not fit: 400 "the input length exceeds
  the context length". The usage then reports the truncated prompt;
- a model without the tools capability: 400 "MODEL does not support tools";
- reasoning in ``reasoning`` (not ``reasoning_content``); each tool call whole in one chunk; a
  finishing chunk with an empty delta; with ``stream_options.include_usage`` a last chunk with
  empty ``choices`` and the usage; ``max_completion_tokens`` is not a field it reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from agent.providers.base import call_function, message_calls, text_field
from tests.support.doubles.llm_server import Failure, FakeLLMServer, Step, prompt_tokens, request_messages
from vocabulary.wire import JsonObject, JsonValue

__all__ = ["OllamaServer"]


class OllamaServer(FakeLLMServer):
    """``ollama serve`` with a model whose ``num_ctx`` is ``context_window``.

    Args:
        supports_tools: the model has the tools capability.
    """

    reasoning_field = "reasoning"
    incremental_tool_calls = False

    def __init__(self, script: Iterable[Step] = (), *, model: str = "qwen3:32b", context_window: int = 8192,
                 supports_tools: bool = True) -> None:
        super().__init__(script, model=model, context_window=context_window)
        self.supports_tools = supports_tools
        #: Messages dropped from each request by the silent truncation.
        self.truncated: list[int] = []

    def error(self, status: int, message: str, *, headers: Mapping[str, str] | None = None,
              **fields: JsonValue) -> Failure:
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
        return Failure(status, {"error": {"message": message, "type": kind, "param": None, "code": None}},
                       headers=dict(headers or {}))

    def validate(self, body: JsonObject, tokens: int) -> Failure | None:
        messages = request_messages(body)
        for message in messages:
            for call in message_calls(message):
                arguments = call_function(call).get("arguments")
                try:
                    value = json.loads(arguments) if isinstance(arguments, str) else arguments
                except ValueError:
                    value = None
                if not isinstance(value, dict):
                    return self.error(400, "invalid tool call arguments")
        if body.get("tools") and not self.supports_tools:
            return self.error(400, f"registry.ollama.ai/library/{self.model} does not support tools")
        last: Mapping[str, JsonValue] = messages[-1] if messages else {}
        if len(prompt_tokens({"messages": [last], "tools": body.get("tools")})) > self.context_window:
            return self.error(400, "the input length exceeds the context length")
        return None

    def prepare(self, body: JsonObject) -> JsonObject:
        messages = request_messages(body)
        system = [m for m in messages[:1] if text_field(m, "role") == "system"]
        rest = messages[len(system):]
        dropped = 0
        while len(rest) > 1 and len(prompt_tokens({**body, "messages": system + rest})) > self.context_window:
            rest = rest[1:]
            dropped += 1
        self.truncated.append(dropped)
        return body if not dropped else {**body, "messages": system + rest}
