"""A fake server that answers as llama.cpp's ``llama-server`` does.

Reproduced (llama.cpp sources: tools/server/server-context.cpp, the slot's prompt check;
tools/server/server-task.cpp ``server_task_result_error::to_json``; tools/server/server-common.cpp
``format_error_response`` and the OpenAI-compatible request parsing):

- errors as ``{"error": {"code", "message", "type"}}``;
- a prompt that does not fit the slot's context: 400, type ``exceed_context_size_error``, "request
  (P tokens) exceeds the available context size (N tokens), try increasing it", with
  ``n_prompt_tokens`` and ``n_ctx`` beside it (older builds: "the request exceeds the available
  context size, try increasing it", ``legacy_wording``);
- ``tools`` without ``--jinja``: "tools param requires --jinja flag" (``server_error``, HTTP 500 in
  current builds);
- while the model loads: 503 ``unavailable_error`` "Loading model";
- ``--reasoning-format deepseek`` (the default): ``reasoning_content`` apart; ``none``: ``<think>``
  in the content;
- streaming with tool-call argument deltas; the usage rides on the finishing chunk (with the
  ``timings``), and the prompt tokens reused from the slot's cache in
  ``prompt_tokens_details.cached_tokens``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tests.support.doubles.llm_server import Failure, FakeLLMServer, Step
from vocabulary.wire import JsonObject, JsonValue

__all__ = ["LlamaCppServer"]


class LlamaCppServer(FakeLLMServer):
    """``llama-server -m MODEL.gguf -c N [--jinja] [--reasoning-format none]``.

    Args:
        jinja: started with ``--jinja`` (tool calling).
        reasoning_format: ``deepseek`` (reasoning apart) or ``none`` (``<think>`` in the content).
        loading_requests: the first this many requests find the model still loading.
        legacy_wording: the context error of older builds (no token counts in the message).
    """

    usage_chunk_apart = False
    usage_needs_include = False
    reports_cached_tokens = True
    cache_block = 1

    def __init__(self, script: Iterable[Step] = (), *, model: str = "qwen2.5-coder-32b-instruct-q4_k_m.gguf",
                 context_window: int = 16_384, jinja: bool = True, reasoning_format: str = "deepseek",
                 loading_requests: int = 0, legacy_wording: bool = False) -> None:
        super().__init__(script, model=model, context_window=context_window)
        self.jinja = jinja
        self.reasoning_field = "reasoning_content" if reasoning_format != "none" else None
        self.reasoning_in_content = reasoning_format == "none"
        self.loading_requests = loading_requests
        self.legacy_wording = legacy_wording

    def error(self, status: int, message: str, *, headers: Mapping[str, str] | None = None,
              **fields: JsonValue) -> Failure:
        kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                503: "unavailable_error"}.get(status, "server_error")
        error: JsonObject = {"code": status, "message": message, "type": fields.pop("type", kind), **fields}
        return Failure(status, {"error": error}, headers=dict(headers or {}))

    def validate(self, body: JsonObject, tokens: int) -> Failure | None:
        if self.loading_requests > 0:
            self.loading_requests -= 1
            return self.error(503, "Loading model")
        if body.get("tools") and not self.jinja:
            return self.error(500, "tools param requires --jinja flag")
        if tokens >= self.context_window:
            if self.legacy_wording:
                return self.error(400, "the request exceeds the available context size, try increasing it",
                                  type="exceed_context_size_error")
            return self.error(400, f"request ({tokens} tokens) exceeds the available context size "
                              f"({self.context_window} tokens), try increasing it", type="exceed_context_size_error",
                              n_prompt_tokens=tokens, n_ctx=self.context_window)
        return None
