"""A fake server that answers as SGLang's OpenAI-compatible server (``sglang.launch_server``) does.

Reproduced (SGLang sources: python/sglang/srt/managers/tokenizer_manager.py, the request
validation; python/sglang/srt/entrypoints/openai/protocol.py ``ErrorResponse``):

- errors as a flat ``{"object": "error", "message", "type": "BadRequest", "param", "code": 400}``
  (no ``error`` wrapper);
- context: "The input (P tokens) is longer than the model's context length (N tokens)." and, with
  the output limit, "Requested token count exceeds the model's maximum context length of N tokens.
  You requested a total of T tokens: P tokens from the input messages and M tokens for the
  completion. Please reduce the number of tokens in the input messages or the completion to fit
  within the limit.";
- ``reasoning_content`` apart with ``--reasoning-parser``; tool-call argument deltas; usage in a
  last chunk with empty ``choices`` when ``stream_options.include_usage``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tests.support.doubles.llm_server import Failure, FakeLLMServer, Step, requested_output_tokens
from vocabulary.wire import JsonObject, JsonValue

__all__ = ["SGLangServer"]


class SGLangServer(FakeLLMServer):
    """``python -m sglang.launch_server --model-path M --context-length N [--tool-call-parser P]
    [--reasoning-parser R]``."""

    def __init__(self, script: Iterable[Step] = (), *, model: str = "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
                 context_window: int = 32_768, reasoning_parser: bool = True) -> None:
        super().__init__(script, model=model, context_window=context_window)
        self.reasoning_field = "reasoning_content" if reasoning_parser else None
        self.reasoning_in_content = not reasoning_parser

    def error(self, status: int, message: str, *, headers: Mapping[str, str] | None = None,
              **fields: JsonValue) -> Failure:
        kind = "BadRequest" if status == 400 else "InternalServerError"
        body: JsonObject = {"object": "error", "message": message, "type": kind, "param": fields.get("param"),
                            "code": status}
        return Failure(status, body, headers=dict(headers or {}))

    def validate(self, body: JsonObject, tokens: int) -> Failure | None:
        if tokens >= self.context_window:
            return self.error(400, f"The input ({tokens} tokens) is longer than the model's context length "
                              f"({self.context_window} tokens).")
        completion = requested_output_tokens(body)
        if completion and tokens + completion >= self.context_window:
            total = tokens + completion
            return self.error(400, f"Requested token count exceeds the model's maximum context length of "
                              f"{self.context_window} tokens. You requested a total of {total} tokens: {tokens} "
                              f"tokens from the input messages and {completion} tokens for the completion. Please "
                              "reduce the number of tokens in the input messages or the completion to fit within the "
                              "limit.")
        return None
