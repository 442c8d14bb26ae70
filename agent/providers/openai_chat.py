"""The ``openai`` provider: Chat Completions with tools against any OpenAI-compatible endpoint.

OpenAI, vLLM, SGLang and Ollama all speak it. The client's own retries are off; this module
retries with exponential backoff on 429 (honouring ``Retry-After``), 5xx, timeouts and connection
errors, and classifies the rest: a context-length error becomes `ContextOverflow`, anything else
`ProviderError`. Whatever the model itself got wrong (arguments that are not JSON, tools that do
not exist, no call at all) comes back inside the `AssistantTurn` for the loop to feed back.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.providers.base import (
    AssistantTurn,
    ContextOverflow,
    ProviderError,
    ToolCall,
    Usage,
    estimate_tokens,
    parse_arguments,
)
from agent.providers.textcalls import parse_text_tool_calls, to_text_messages

if TYPE_CHECKING:
    from config.settings import LLMProfile

__all__ = ["OpenAIProvider", "RetryPolicy", "is_context_overflow"]

#: Phrases servers use when a prompt does not fit (OpenAI, vLLM, SGLang, Ollama, llama.cpp).
_CONTEXT_PHRASES = (
    "context_length_exceeded", "maximum context length", "context length", "context window",
    "too many tokens", "prompt is too long", "exceeds the model", "input is too long",
)
#: Statuses worth another try besides 429 and 5xx (the openai client retries these too).
_RETRY_STATUSES = frozenset({408, 409})


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How transient endpoint errors are retried."""

    #: Retries after the first try (so ``max_retries + 1`` requests at most).
    max_retries: int = 4
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    #: A server asking to wait longer than this is waited on this long only (a job must move).
    max_retry_after_s: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after_s))
        return min(self.max_delay_s, self.base_delay_s * (2 ** attempt))


def is_context_overflow(status: int | None, text: str) -> bool:
    """Whether an error response says the prompt is longer than the model's context."""
    lowered = text.lower()
    return status in (400, 413, 422, None) and any(p in lowered for p in _CONTEXT_PHRASES)


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    for key in ("retry-after-ms", "retry-after"):
        value = headers.get(key)
        if value is None:
            continue
        try:
            seconds = float(value)
        except ValueError:
            return None
        return seconds / 1000.0 if key.endswith("-ms") else seconds
    return None


def _error_text(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            return " ".join(str(error.get(k, "")) for k in ("message", "code", "type")).strip()
        return str(error)
    return str(getattr(exc, "message", "") or exc)


class OpenAIProvider:
    """Chat Completions with tools (or the text fallback) through the real ``openai`` client.

    Args:
        base_url: the endpoint (``None``: OpenAI's).
        model: the model name the endpoint knows.
        api_key: the key (``"none"`` for endpoints that want none).
        timeout_s: per request.
        price_in_per_mtok, price_out_per_mtok: USD per million tokens, for the cost per message.
        text_tool_calls: the endpoint has no function calling: tools go into the prompt.
        retry: the retry policy for transient errors.
        sleep: how to wait between retries (tests pass a recorder).
    """

    def __init__(self, *, base_url: str | None, model: str, api_key: str, timeout_s: float = 120.0,
                 price_in_per_mtok: float = 0.0, price_out_per_mtok: float = 0.0,
                 text_tool_calls: bool = False, retry: RetryPolicy | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        import openai  # the service extra; the harness-only GPU box never imports this module

        self._openai = openai
        self.model = model
        self.text_tool_calls = text_tool_calls
        self.price_in = price_in_per_mtok
        self.price_out = price_out_per_mtok
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)

    @classmethod
    def from_profile(cls, profile: LLMProfile, *, sleep: Callable[[float], None] = time.sleep) -> OpenAIProvider:
        """A provider for a server-side profile; the key is read from ``profile.api_key_env``."""
        api_key = (os.environ.get(profile.api_key_env) if profile.api_key_env else None) or "none"
        return cls(base_url=profile.base_url, model=profile.model, api_key=api_key, timeout_s=profile.timeout_s,
                   price_in_per_mtok=profile.price_in_per_mtok, price_out_per_mtok=profile.price_out_per_mtok,
                   text_tool_calls=profile.text_tool_calls, retry=RetryPolicy(max_retries=profile.max_retries),
                   sleep=sleep)

    # -- one request, retried -----------------------------------------------------------------
    def _create(self, request: dict[str, Any]) -> tuple[Any, float]:
        openai = self._openai
        last: Exception | None = None
        for attempt in range(self.retry.max_retries + 1):
            started = time.perf_counter()
            retry_after: float | None = None
            try:
                response = self._client.chat.completions.create(**request)
            except openai.APIStatusError as exc:
                text = _error_text(exc)
                if is_context_overflow(exc.status_code, text):
                    raise ContextOverflow(text, status=exc.status_code) from None
                if exc.status_code != 429 and exc.status_code < 500 and exc.status_code not in _RETRY_STATUSES:
                    raise ProviderError(f"the LLM endpoint refused the request: {text}",
                                        status=exc.status_code) from None
                last, retry_after = exc, _retry_after(exc)
            except (openai.APIConnectionError, openai.APIResponseValidationError) as exc:  # timeouts included
                last = exc
            else:
                if getattr(response, "choices", None):
                    return response, (time.perf_counter() - started) * 1e3
                last = ProviderError("the endpoint answered with no choices")
            if attempt < self.retry.max_retries:
                self._sleep(self.retry.delay(attempt, retry_after))
        raise ProviderError(f"the LLM endpoint failed after {self.retry.max_retries + 1} tries: "
                            f"{type(last).__name__}: {_error_text(last)}",
                            status=getattr(last, "status_code", None))

    def complete(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], *,
                 temperature: float) -> AssistantTurn:
        if self.text_tool_calls:
            request: dict[str, Any] = {"model": self.model, "messages": to_text_messages(messages, tools),
                                       "temperature": temperature}
        else:
            request = {"model": self.model, "messages": [dict(m) for m in messages], "temperature": temperature}
            if tools:
                request["tools"] = [dict(t) for t in tools]
        response, latency_ms = self._create(request)
        choice = response.choices[0]
        message = choice.message
        content = getattr(message, "content", None)
        refusal = getattr(message, "refusal", None)
        if self.text_tool_calls:
            calls = parse_text_tool_calls(content, tools, id_prefix=f"text-{uuid.uuid4().hex[:8]}")
        else:
            calls = tuple(self._parse_call(c) for c in (getattr(message, "tool_calls", None) or ()))
        usage = getattr(response, "usage", None)
        tokens_in = getattr(usage, "prompt_tokens", None)
        tokens_out = getattr(usage, "completion_tokens", None)
        if tokens_in is None:
            tokens_in = estimate_tokens(request["messages"])
        if tokens_out is None:
            tokens_out = estimate_tokens([{"content": content or "",
                                           "tool_calls": [c.to_message() for c in calls]}])
        cost = tokens_in * self.price_in / 1e6 + tokens_out * self.price_out / 1e6
        return AssistantTurn(content=content, tool_calls=calls,
                             usage=Usage(tokens_in=int(tokens_in), tokens_out=int(tokens_out), cost_usd=cost),
                             latency_ms=latency_ms, finish_reason=getattr(choice, "finish_reason", None),
                             refusal=refusal or None)

    @staticmethod
    def _parse_call(call: Any) -> ToolCall:
        call_id = getattr(call, "id", None) or f"call_{uuid.uuid4().hex[:12]}"
        function = getattr(call, "function", None)
        if function is None:
            return ToolCall(id=call_id, name=str(getattr(call, "type", "?")), raw_arguments="", arguments=None,
                            error="only function tool calls are supported")
        raw = getattr(function, "arguments", None)
        raw_text = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
        arguments, error = parse_arguments(raw)
        return ToolCall(id=call_id, name=str(getattr(function, "name", "") or ""), raw_arguments=raw_text,
                        arguments=arguments, error=error)
