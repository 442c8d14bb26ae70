"""A fake server that answers as vLLM's OpenAI-compatible server (``vllm serve``) does.

Reproduced (vLLM sources: vllm/entrypoints/openai/engine/protocol.py ``ErrorResponse``,
vllm/entrypoints/openai/chat_completion/serving.py, vllm/entrypoints/chat_utils.py
``_postprocess_messages``, vllm/entrypoints/openai/engine/serving.py):

- errors as ``{"error": {"message", "type": "BadRequestError", "param", "code": 400}}``;
- the history re-validated: every earlier tool call's ``arguments`` is ``json.loads``-ed to a dict
  for the chat template. A string that is not JSON fails; vLLM versions that catch it answer 400
  with the decoder's message (``f"{e} {e.__cause__}"``: "Expecting ',' delimiter: line 1 column 40
  (char 39) None"), others let it escape as HTTP 500 "Internal Server Error" (``history_status``).
  Arguments that decode to something other than an object break templates that iterate them
  (``tool_call.arguments|items``): 400 "Can only get item pairs from a mapping.";
- ``tools`` without ``--enable-auto-tool-choice``/``--tool-call-parser``: 400 '"auto" tool choice
  requires --enable-auto-tool-choice and --tool-call-parser to be set' (``tool_parser=False``);
- context: "This model's maximum context length is N tokens. However, your request has P input
  tokens. Please reduce the length of the input messages." (param ``input_tokens``), and for an
  output limit that does not fit: "'max_tokens' or 'max_completion_tokens' is too large: M. This
  model's maximum context length is N tokens and your request has P input tokens (M > N - P).";
- chat templates that require strict alternation raise "Conversation roles must alternate
  user/assistant/user/assistant/..." (a jinja2 TemplateError: 400) (``strict_roles``);
- reasoning parser on: ``reasoning_content`` apart (off: ``<think>`` stays in the content);
- streaming with tool-call argument deltas; usage in a last chunk with empty ``choices`` when
  ``stream_options.include_usage``; prefix caching reported in ``prompt_tokens_details``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from agent.providers.base import call_function, message_calls
from tests.support.doubles.llm_server import (
    Failure,
    FakeLLMServer,
    Step,
    request_messages,
    requested_output_tokens,
    roles_alternate,
)
from vocabulary.wire import JsonObject, JsonValue

__all__ = ["VLLMServer"]


class VLLMServer(FakeLLMServer):
    """``vllm serve MODEL --max-model-len N [--enable-auto-tool-choice --tool-call-parser P]
    [--reasoning-parser R]``.

    Args:
        tool_parser: started with a tool parser (else ``tools`` are refused).
        reasoning_parser: started with a reasoning parser (``reasoning_content`` apart).
        history_status: the status of a history whose tool-call arguments are not JSON (400 in
            versions that catch the decode error, 500 in those that do not).
        strict_roles: the model's chat template demands strict user/assistant alternation.
        template_tools: with ``strict_roles``, the template knows tool results (Mistral-style:
            tool messages may follow a call); without, only user and assistant (Llama-2/Gemma-style).
    """

    reports_cached_tokens = True

    def __init__(self, script: Iterable[Step] = (), *, model: str = "Qwen/Qwen3-32B", context_window: int = 32_768,
                 tool_parser: bool = True, reasoning_parser: bool = True, history_status: int = 400,
                 strict_roles: bool = False, template_tools: bool = True) -> None:
        super().__init__(script, model=model, context_window=context_window)
        self.tool_parser = tool_parser
        self.reasoning_field = "reasoning_content" if reasoning_parser else None
        self.reasoning_in_content = not reasoning_parser
        self.history_status = history_status
        self.strict_roles = strict_roles
        self.template_tools = template_tools

    def error(self, status: int, message: str, *, headers: Mapping[str, str] | None = None,
              **fields: JsonValue) -> Failure:
        kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
        error: JsonObject = {"message": message, "type": kind, "param": fields.get("param"), "code": status}
        return Failure(status, {"error": error}, headers=dict(headers or {}))

    def validate(self, body: JsonObject, tokens: int) -> Failure | None:
        if body.get("tools") and not self.tool_parser and body.get("tool_choice", "auto") == "auto":
            return self.error(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                              "to be set")
        for message in request_messages(body):
            for call in message_calls(message):
                arguments = call_function(call).get("arguments")
                if not arguments or isinstance(arguments, Mapping):
                    continue
                try:
                    if not isinstance(arguments, str):  # json.loads's own words
                        raise TypeError(f"the JSON object must be str, bytes or bytearray, not "
                                        f"{type(arguments).__name__}")
                    value = json.loads(arguments)
                except (TypeError, ValueError) as exc:
                    if self.history_status == 500:
                        return Failure(500, "Internal Server Error")
                    return self.error(400, f"{exc} None")
                if not isinstance(value, dict):
                    return self.error(400, "Can only get item pairs from a mapping.")
        if self.strict_roles and roles_alternate(request_messages(body), allow_tools=self.template_tools):
            return self.error(400, "Conversation roles must alternate user/assistant/user/assistant/...")
        if tokens >= self.context_window:
            return self.error(400, f"This model's maximum context length is {self.context_window} tokens. However, "
                              f"your request has {tokens} input tokens. Please reduce the length of the input "
                              "messages.", param="input_tokens")
        completion = requested_output_tokens(body)
        if completion and tokens + completion > self.context_window:
            return self.error(400, f"'max_tokens' or 'max_completion_tokens' is too large: {completion}. This model's "
                              f"maximum context length is {self.context_window} tokens and your request has {tokens} "
                              f"input tokens ({completion} > {self.context_window} - {tokens}).")
        return None
