"""A fake server that answers as OpenAI's Chat Completions API does, chat and reasoning models.

Reproduced (OpenAI API reference, https://platform.openai.com/docs/api-reference/chat, and the
errors users report against it, e.g. github.com/microsoft/vscode-copilot-release/issues/8065):

- errors as ``{"error": {"message", "type", "param", "code"}}``;
- a prompt plus its output limit over the window: 400 ``context_length_exceeded``, "This model's
  maximum context length is N tokens. However, you requested M tokens (P in the messages, C in the
  completion). Please reduce the length of the messages or completion.";
- a ``tool`` message must answer a preceding ``tool_calls`` message, and every call must be
  answered: 400 "Invalid parameter: messages with role 'tool' must be a response to a preceeding
  message with 'tool_calls'." / "An assistant message with 'tool_calls' must be followed by tool
  messages responding to each 'tool_call_id'. The following tool_call_ids did not have response
  messages: ...";
- reasoning models (o-series, gpt-5): 400 ``unsupported_parameter`` for ``temperature`` ("Unsupported
  parameter: 'temperature' is not supported with this model.") and for ``max_tokens`` ("... Use
  'max_completion_tokens' instead."); reasoning is hidden, counted in
  ``usage.completion_tokens_details.reasoning_tokens``;
- prompt caching: ``usage.prompt_tokens_details.cached_tokens`` for a prefix shared with the
  previous request, from 1024 tokens on, in blocks of 128;
- streaming: a role chunk, content deltas, tool calls (id and name first, then argument pieces),
  a finishing chunk, and with ``stream_options.include_usage`` a last chunk with empty
  ``choices`` and the usage;
- 429 with ``retry-after`` / ``retry-after-ms`` headers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from agent.providers.base import message_calls, text_field
from tests.support.doubles.llm_server import Failure, FakeLLMServer, Step, request_messages, requested_output_tokens
from vocabulary.wire import JsonObject, JsonValue

__all__ = ["OpenAIServer"]


class OpenAIServer(FakeLLMServer):
    """OpenAI's Chat Completions.

    Args:
        reasoning_model: behave as a reasoning model (hidden reasoning, no ``temperature``, no
            ``max_tokens``).
    """

    reasoning_field = None
    reports_cached_tokens = True
    cache_block = 128
    cache_min_tokens = 1024

    def __init__(self, script: Iterable[Step] = (), *, model: str = "gpt-4o-mini", context_window: int = 128_000,
                 reasoning_model: bool = False) -> None:
        super().__init__(script, model=model, context_window=context_window)
        self.reasoning_model = reasoning_model

    def rate_limited(self, retry_after_s: float) -> Failure:
        return self.error(429, "Rate limit reached for requests per min. Please try again later.",
                          type="requests", code="rate_limit_exceeded",
                          headers={"retry-after": f"{retry_after_s:g}",
                                   "retry-after-ms": f"{int(retry_after_s * 1000)}"})

    def validate(self, body: JsonObject, tokens: int) -> Failure | None:
        if self.reasoning_model:
            if "temperature" in body:
                return self.error(400, "Unsupported parameter: 'temperature' is not supported with this model.",
                                  param="temperature", code="unsupported_parameter")
            if "max_tokens" in body:
                return self.error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                                  "Use 'max_completion_tokens' instead.", param="max_tokens",
                                  code="unsupported_parameter")
        problem = _tool_answers(request_messages(body))
        if problem is not None:
            return self.error(400, problem[1], param=f"messages.[{problem[0]}].role")
        completion = requested_output_tokens(body)
        if tokens + completion > self.context_window:
            return self.error(400, f"This model's maximum context length is {self.context_window} tokens. However, "
                              f"you requested {tokens + completion} tokens ({tokens} in the messages, {completion} in "
                              "the completion). Please reduce the length of the messages or completion.",
                              param="messages", code="context_length_exceeded")
        return None


def _tool_answers(messages: Sequence[Mapping[str, JsonValue]]) -> tuple[int, str] | None:
    """(index, message) of the first tool-message rule the history breaks."""
    pending: list[str | None] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = text_field(message, "tool_call_id")
            if call_id not in pending:
                return i, ("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                           "message with 'tool_calls'.")
            pending.remove(call_id)
            continue
        if pending:
            return i - 1, ("An assistant message with 'tool_calls' must be followed by tool messages responding "
                           "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                           + ", ".join(str(p) for p in pending))
        if role == "assistant":
            pending = [text_field(c, "id") for c in message_calls(message)]
    return None
