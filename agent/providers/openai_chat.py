"""The ``openai`` provider: Chat Completions with tools against any OpenAI-compatible endpoint.

OpenAI, vLLM, SGLang, llama.cpp's server and Ollama all speak it, each with its own accent; the
profile (`config.settings.LLMProfile`) says which, and this module copes with the rest:

- **Streaming** by default (``stream_options.include_usage`` for the usage), read in a helper
  thread: the caller's ``should_stop`` is polled between chunks (and while none come), so a
  wall-clock limit or a cancel cuts the generation within a poll; a stream silent for the
  profile's ``idle_timeout_s`` is abandoned and retried, while a long generation that keeps
  sending finishes. What abandoned tries cost is estimated and reported.
- **Retries** with exponential backoff on 429 (honouring ``Retry-After``/``retry-after-ms``), 5xx,
  timeouts and connection errors; the client's own retries are off.
- **Parameters**: ``max_tokens`` or ``max_completion_tokens`` always sent (the profile's output
  limit), ``extra_body`` merged, ``omit_params`` left out. A 400 that names an unsupported
  parameter is retried once without it (or, for ``max_tokens``, with ``max_completion_tokens``),
  and the provider remembers it for the rest of the job.
- **Errors**: a context-length error in any server's wording becomes `ContextOverflow`; a server
  refusing ``tools`` switches the request to the text tool protocol (profile ``auto``); anything
  else becomes `ProviderError` with the server's message.
- **Replies**: tool-call arguments assembled from deltas; ``reasoning_content``/``reasoning`` and
  ``<think>`` blocks in the content kept apart (`AssistantTurn.reasoning`); usage with cached and
  reasoning tokens, priced per the profile. A reply cut at the output limit says so in each
  unfinished call's error.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import queue
import re
import threading
import time
import types
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.providers.base import (
    AssistantTurn,
    ContextOverflow,
    Interrupted,
    Message,
    ProviderError,
    ToolCall,
    Usage,
    estimate_text_tokens,
    estimate_tokens,
    parse_arguments,
)
from agent.providers.textcalls import parse_text_tool_calls, to_text_messages
from vocabulary.wire import JsonObject, JsonValue, WireError, as_json

if TYPE_CHECKING:
    from config.settings import LLMProfile

__all__ = [
    "OpenAIProvider",
    "Pricing",
    "RetryPolicy",
    "is_context_overflow",
    "refuses_tools",
    "split_think",
    "unsupported_parameter",
]

#: What servers say when a prompt does not fit. OpenAI (``context_length_exceeded``, "This model's
#: maximum context length is ..."), vLLM ("This model's maximum context length is N tokens. However,
#: your request has M input tokens"), llama.cpp ("request (N tokens) exceeds the available context
#: size (M tokens), try increasing it", type ``exceed_context_size_error``), SGLang ("The input (N
#: tokens) is longer than the model's context length (M tokens)", "Requested token count exceeds
#: the model's maximum context length of M tokens"), Ollama ("the input length exceeds the context
#: length", "the prompt is longer than the context length currently available to the model").
_CONTEXT_PHRASES = (
    "context_length_exceeded", "maximum context length", "exceed_context_size_error",
    "exceeds the available context size", "exceeds context size", "longer than the model's context length",
    "longer than the context length", "exceeds the context length", "context window", "prompt is too long",
    "too many tokens", "input is too long",
)
#: What servers say when they will not take ``tools`` at all: llama.cpp without ``--jinja``,
#: vLLM without ``--enable-auto-tool-choice``, Ollama for a model without the capability.
_TOOLS_REFUSED = (
    "tools param requires --jinja", "tool choice requires --enable-auto-tool-choice",
    "does not support tools", "no endpoints found that support tool use",
)
#: How servers name a parameter they do not take: OpenAI's reasoning models ("Unsupported
#: parameter: 'temperature' is not supported with this model.", "Unsupported value: 'temperature'
#: does not support 0.2 ..."), llama.cpp ("Unsupported param: tool_choice").
_UNSUPPORTED = (
    re.compile(r"unsupported (?:parameter|value): '([A-Za-z_][\w.]*)'", re.IGNORECASE),
    re.compile(r"unsupported param: ([A-Za-z_]\w*)", re.IGNORECASE),
    re.compile(r"'([A-Za-z_]\w*)' is not supported with this model", re.IGNORECASE),
    re.compile(r"unrecognized request argument supplied: ([A-Za-z_]\w*)", re.IGNORECASE),
)
#: Statuses worth another try besides 429 and 5xx (the openai client retries these too).
_RETRY_STATUSES = frozenset({408, 409})
#: Request fields a 400 may never drop: without them there is no request.
_ESSENTIAL = frozenset({"model", "messages"})
#: Seconds between looks at ``should_stop`` while a reply is awaited.
POLL_S = 0.2
#: Seconds to connect to the endpoint (separate from the reply's own timeouts).
CONNECT_TIMEOUT_S = 10.0
#: Parameter adjustments (drop one, rename one, switch to text tools) per request at most.
MAX_ADJUSTMENTS = 4

_THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


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
        return float(min(self.max_delay_s, self.base_delay_s * (2 ** attempt)))


@dataclass(frozen=True, kw_only=True)
class Pricing:
    """USD per million tokens; cached input and reasoning default to the input and output prices."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None
    reasoning: float | None = None

    def cost(self, usage: Usage) -> float:
        cached = min(usage.tokens_cached, usage.tokens_in)
        reasoning = min(usage.tokens_reasoning, usage.tokens_out)
        cached_price = self.input if self.cached_input is None else self.cached_input
        reasoning_price = self.output if self.reasoning is None else self.reasoning
        return ((usage.tokens_in - cached) * self.input + cached * cached_price
                + (usage.tokens_out - reasoning) * self.output + reasoning * reasoning_price) / 1e6


def is_context_overflow(status: int | None, text: str) -> bool:
    """Whether an error response says the prompt is longer than the model's context."""
    lowered = text.lower()
    return status in (400, 413, 422, 500, None) and any(p in lowered for p in _CONTEXT_PHRASES)


def refuses_tools(text: str) -> bool:
    """Whether an error says the server (or model) takes no ``tools`` at all."""
    lowered = text.lower()
    return any(p in lowered for p in _TOOLS_REFUSED)


def unsupported_parameter(error: Mapping[str, JsonValue], text: str) -> str | None:
    """The request parameter a 400 says is unsupported, if it names one."""
    code = str(error.get("code") or "")
    param = error.get("param")
    if code in ("unsupported_parameter", "unsupported_value") and isinstance(param, str) and param:
        return param
    for pattern in _UNSUPPORTED:
        match = pattern.search(text)
        if match:
            return match.group(1)
    return None


def split_think(content: str | None) -> tuple[str | None, str | None]:
    """``content`` without its ``<think>`` blocks, and the blocks' text.

    Reasoning models served without a reasoning parser put their thoughts in the content; some
    chat templates open the ``<think>`` in the prompt, so a reply may hold only the closing tag.
    """
    if not content or "think>" not in content:
        return content, None
    thoughts = [m.strip() for m in _THINK_BLOCK.findall(content)]
    rest = _THINK_BLOCK.sub("", content)
    if "</think>" in rest:  # opened in the prompt: everything before the tag was thought
        before, _, rest = rest.partition("</think>")
        thoughts.insert(0, before.strip())
    if "<think>" in rest:  # opened but never closed: cut off while thinking
        rest, _, after = rest.partition("<think>")
        thoughts.append(after.strip())
    reasoning = "\n\n".join(t for t in thoughts if t) or None
    return rest.strip() or None, reasoning


def _retry_after(exc: Any) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return float(value) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:  # an HTTP date
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_body(exc: Any) -> JsonObject:
    """The error object of a failed response: OpenAI's ``{"error": {...}}`` or SGLang's flat one."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            try:
                return {str(k): as_json(v) for k, v in inner.items()}
            except WireError:
                return {str(k): str(v) for k, v in inner.items()}
        return {"message": str(inner)}
    return {}


def _error_text(exc: Any) -> str:
    error = _error_body(exc)
    if error:
        parts = [str(error.get("message") or "")]
        for key in ("type", "code"):
            if error.get(key) not in (None, "") and not isinstance(error.get(key), int) \
                    and str(error.get(key)) not in parts[0]:
                parts.append(f"[{key}: {error[key]}]")
        return " ".join(p for p in parts if p).strip()
    return str(getattr(exc, "message", "") or exc)


class _IdleTimeout(Exception):
    """No chunk (or no reply) came within the allowed time."""


@dataclass
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: str = ""
    arguments_object: Any = None


@dataclass
class _Reply:
    """A reply as it arrives (from chunks) or arrived (from one response)."""

    content: str = ""
    reasoning: str = ""
    refusal: str = ""
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Any = None
    chunks: int = 0

    def add_chunk(self, chunk: Any) -> None:
        self.chunks += 1
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        for choice in getattr(chunk, "choices", None) or ():
            delta = getattr(choice, "delta", None)
            if delta is not None:
                self._add_message(delta, incremental=True)
            if getattr(choice, "finish_reason", None):
                self.finish_reason = choice.finish_reason

    def add_response(self, response: Any) -> None:
        self.usage = getattr(response, "usage", None)
        choice = response.choices[0]
        self._add_message(choice.message, incremental=False)
        self.finish_reason = getattr(choice, "finish_reason", None)

    def _add_message(self, message: Any, *, incremental: bool) -> None:
        self.content += getattr(message, "content", None) or ""
        self.refusal += getattr(message, "refusal", None) or ""
        extra = getattr(message, "model_extra", None) or {}
        # vLLM and SGLang with a reasoning parser, llama.cpp: reasoning_content; Ollama, newer vLLM: reasoning.
        for key in ("reasoning_content", "reasoning"):
            value = getattr(message, key, None) or extra.get(key)
            if isinstance(value, str):
                self.reasoning += value
        for position, call in enumerate(getattr(message, "tool_calls", None) or ()):
            index = getattr(call, "index", None)
            if index is None or not incremental:
                index = position if not incremental else len(self.calls)
            partial = self.calls.setdefault(index, _PartialCall())
            partial.id = partial.id or getattr(call, "id", None)
            function = getattr(call, "function", None)
            if function is None:
                continue
            name = getattr(function, "name", None)
            if name and not partial.name:
                partial.name = name
            arguments = getattr(function, "arguments", None)
            if isinstance(arguments, str):
                partial.arguments += arguments
            elif arguments is not None:  # an object where a JSON string belongs
                partial.arguments_object = arguments

    @property
    def output_chars(self) -> int:
        return len(self.content) + len(self.reasoning) + sum(len(c.arguments) for c in self.calls.values())


class OpenAIProvider:
    """Chat Completions with tools (or the text fallback) through the real ``openai`` client.

    Args:
        base_url: the endpoint (``None``: OpenAI's).
        model: the model name the endpoint knows.
        api_key: the key (``"none"`` for endpoints that want none).
        profile: everything else the endpoint needs (see `config.settings.LLMProfile`).
        sleep: how to wait between retries (tests pass a recorder); by default a wait that
            ``should_stop`` can end.
    """

    def __init__(self, *, base_url: str | None, model: str, api_key: str, profile: LLMProfile,
                 sleep: Callable[[float], None] | None = None) -> None:
        import openai  # the service extra; the harness-only GPU box never imports this module

        self._openai = openai
        self.model = model
        self.profile = profile
        self.retry = RetryPolicy(max_retries=profile.max_retries)
        self.pricing = Pricing(input=profile.price_in_per_mtok, output=profile.price_out_per_mtok,
                               cached_input=profile.price_cached_in_per_mtok,
                               reasoning=profile.price_reasoning_per_mtok)
        self._sleep = sleep
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                                     # The client's own transport's class (httpx's, or its fork httpx2's).
                                     timeout=openai.Timeout(profile.timeout_s, connect=CONNECT_TIMEOUT_S))
        #: Where requests go, as errors name it (the client's default is OpenAI's).
        self.endpoint = str(self._client.base_url).rstrip("/")
        self._lock = threading.Lock()
        #: What this job learned of the endpoint: parameters it refuses (``stream`` too, for a
        #: server that answers a streamed request with one JSON body), the output-limit name,
        #: whether it takes ``tools``.
        self._omitted: set[str] = set(profile.omit_params)
        self._max_tokens_param: str = profile.max_tokens_param
        self._tools_refused = profile.text_tool_calls.value == "always"

    @classmethod
    def from_profile(cls, profile: LLMProfile, *, sleep: Callable[[float], None] | None = None) -> OpenAIProvider:
        """A provider for a server-side profile; the key is read from ``profile.api_key_env``."""
        api_key = profile.api_key() or "none"
        return cls(base_url=profile.base_url, model=profile.model, api_key=api_key, profile=profile, sleep=sleep)

    # -- what the job learned ----------------------------------------------------------------
    @property
    def omitted_params(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._omitted)

    @property
    def tools_refused(self) -> bool:
        """The endpoint refused ``tools`` (or the profile says it has none): text protocol only."""
        with self._lock:
            return self._tools_refused

    # -- the request -------------------------------------------------------------------------
    def _build(self, messages: Sequence[Mapping[str, JsonValue]], tools: Sequence[Mapping[str, JsonValue]], *,
               temperature: float, text_mode: bool) -> tuple[JsonObject, JsonObject]:
        """The request's named parameters and its ``extra_body`` (both JSON: the body sent)."""
        pass_back = self.profile.reasoning_history.value == "pass_back"
        outgoing: list[Message] = [dict(m) for m in messages]
        if not pass_back:
            for message in outgoing:
                message.pop("reasoning_content", None)
        if text_mode:
            outgoing = to_text_messages(outgoing, tools)
        request: JsonObject = {"model": self.model, "messages": _alternating(outgoing),
                               "temperature": temperature}
        if tools and not text_mode:
            request["tools"] = [dict(t) for t in tools]
        with self._lock:
            omitted, limit_name = set(self._omitted), self._max_tokens_param
        if self.profile.max_output_tokens is not None:
            request[limit_name] = self.profile.max_output_tokens
        if self.profile.stream:
            request["stream"] = True
            request["stream_options"] = {"include_usage": True}
        extra: JsonObject = {k: v for k, v in self.profile.extra_body.items() if k not in omitted}
        for name in omitted - _ESSENTIAL:
            request.pop(name, None)
        if "stream_options" in omitted:
            request.pop("stream_options", None)
        return request, extra

    def _adjust(self, exc: Any, request: Mapping[str, JsonValue], extra: Mapping[str, JsonValue], *, text_mode: bool,
                adjusted: set[str], status: int) -> str | None:
        """How a 400 can be answered by changing the request: ``"text"``, a dropped or renamed
        parameter's name, or None. Each parameter is adjusted once per request."""
        error, text = _error_body(exc), _error_text(exc)
        if not text_mode and "tools" in request and refuses_tools(text):
            if self.profile.text_tool_calls.value == "never" or "tools" in adjusted:
                return None
            with self._lock:
                self._tools_refused = True
            return "tools"
        name = unsupported_parameter(error, text) if status == 400 else None
        if name is None or name in adjusted or name in _ESSENTIAL:
            return None
        if name == "max_tokens" and "max_completion_tokens" in text and "max_tokens" in request:
            with self._lock:
                self._max_tokens_param = "max_completion_tokens"
            return name
        if name not in request and name not in extra:
            return None
        with self._lock:
            self._omitted.add(name)
        return name

    # -- one turn ----------------------------------------------------------------------------
    def complete(self, messages: Sequence[Mapping[str, JsonValue]], tools: Sequence[Mapping[str, JsonValue]], *,
                 temperature: float, text_tools: bool = False,
                 should_stop: Callable[[], bool] | None = None) -> AssistantTurn:
        stop = should_stop or (lambda: False)
        openai = self._openai
        text_mode = text_tools or self.tools_refused
        abandoned = Usage()
        adjusted: set[str] = set()
        attempt = 0
        last_error = "no request was made"
        last_status: int | None = None
        while True:
            if stop():
                raise Interrupted("the LLM call was not made: the job is stopping", usage=abandoned)
            request, extra = self._build(messages, tools, temperature=temperature, text_mode=text_mode)
            started = time.perf_counter()
            reply = _Reply()
            retry_after: float | None = None
            try:
                self._call(request, extra, reply, stop)
            except Interrupted as exc:
                raise Interrupted(str(exc), usage=abandoned + self._estimate(request, reply)) from None
            except openai.APIStatusError as exc:
                text, status = _error_text(exc), exc.status_code
                if is_context_overflow(status, text):
                    raise ContextOverflow(text, status=status, usage=abandoned) from None
                # llama.cpp refuses tools with a 500, everything else with a 400
                if status in (400, 500) and len(adjusted) < MAX_ADJUSTMENTS:
                    change = self._adjust(exc, request, extra, text_mode=text_mode, adjusted=adjusted,
                                          status=status)
                    if change is not None:
                        adjusted.add(change)
                        text_mode = text_mode or change == "tools"
                        continue
                if status != 429 and status < 500 and status not in _RETRY_STATUSES:
                    raise ProviderError(f"the LLM endpoint {self.endpoint} refused the request: {text}",
                                        status=status, usage=abandoned) from None
                last_error, last_status, retry_after = text, status, _retry_after(exc)
            except openai.APIError as exc:  # an error event inside a stream, a connection error, a timeout
                text = _error_text(exc)
                if is_context_overflow(None, text):
                    raise ContextOverflow(text, usage=abandoned) from None
                if self._reached_server(exc, reply):
                    abandoned += self._estimate(request, reply)
                cause = exc.__cause__
                why = f" ({type(cause).__name__}: {cause})" if cause is not None and str(cause) else ""
                last_error, last_status = f"{type(exc).__name__}: {text}{why}", getattr(exc, "status_code", None)
            except _IdleTimeout as exc:
                abandoned += self._estimate(request, reply)
                last_error, last_status = str(exc), None
            else:
                if reply.chunks or reply.content or reply.calls or reply.finish_reason:
                    latency_ms = (time.perf_counter() - started) * 1e3
                    return self._turn(reply, request, tools, text_mode=text_mode, latency_ms=latency_ms,
                                      abandoned=abandoned)
                last_error, last_status = "the endpoint answered with no choices", None
            if attempt >= self.retry.max_retries:
                raise ProviderError(f"the LLM endpoint {self.endpoint} failed after {attempt + 1} tries: "
                                    f"{last_error}", status=last_status, usage=abandoned)
            self._pause(self.retry.delay(attempt, retry_after), stop)
            attempt += 1

    def _call(self, request: JsonObject, extra: JsonObject, reply: _Reply, stop: Callable[[], bool]) -> None:
        """One HTTP request, read in a helper thread while this one watches ``stop`` and the clock.

        Raises what the client raised, `_IdleTimeout`, or `Interrupted`.
        """
        streaming = bool(request.get("stream"))
        # The client's own read timeout backs ours up (it ends the helper thread of an abandoned call).
        read_s = self.profile.idle_timeout_s if streaming else self.profile.timeout_s
        timeout = self._openai.Timeout(read_s + 1.0, connect=CONNECT_TIMEOUT_S)
        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        abandon = threading.Event()
        # The body is assembled as JSON (parameters dropped and renamed as the endpoint asks), so
        # the client's typed parameters are not what checks it: its ``create`` is called untyped.
        create: Callable[..., Any] = self._client.chat.completions.create
        streams: list[Any] = []  # the open stream, for closing it from this thread

        def pump() -> None:
            try:
                result = create(**request, extra_body=extra or None, timeout=timeout)
                if not streaming:
                    events.put(("response", result))
                    return
                streams.append(result)
                completion = self._unstreamed(result)
                if completion is not None:
                    events.put(("response", completion))
                    return
                for chunk in result:
                    if abandon.is_set():
                        break
                    events.put(("chunk", chunk))
                events.put(("end", None))
            except Exception as exc:  # noqa: BLE001 - handed to the caller, which classifies it
                events.put(("error", exc))
            finally:
                if abandon.is_set() and streams:
                    _close_quietly(streams[0])

        thread = threading.Thread(target=pump, name="llm-request", daemon=True)
        thread.start()
        last = time.monotonic()
        try:
            while True:
                try:
                    kind, item = events.get(timeout=POLL_S)
                except queue.Empty:
                    if stop():
                        raise Interrupted("the LLM call was cut: the job is stopping") from None
                    if time.monotonic() - last > read_s:
                        what = "between stream chunks" if streaming else "for the reply"
                        raise _IdleTimeout(f"no data for {read_s:g} s {what}") from None
                    continue
                last = time.monotonic()
                if kind == "chunk":
                    reply.add_chunk(item)
                    if stop():
                        raise Interrupted("the LLM call was cut: the job is stopping")
                elif kind == "response":
                    if getattr(item, "choices", None):
                        reply.add_response(item)
                    return
                elif kind == "end":
                    return
                else:
                    raise item
        except BaseException:
            abandon.set()
            if streams:
                _close_quietly(streams[0])
            raise

    def _unstreamed(self, stream: Any) -> Any:
        """The completion of a server that ignored ``"stream": true`` and answered one JSON body
        (LocalAI before its streaming support did; `tests.support.doubles.LocalAIServer`), as attributes
        like the client's own objects; ``None`` for a stream of events. The provider remembers it:
        later requests of the job are not streamed, so a long reply is waited for with the
        profile's ``timeout_s`` rather than cut by the idle timeout between chunks."""
        response = getattr(stream, "response", None)
        content_type = str(getattr(response, "headers", {}).get("content-type", ""))
        if response is None or "event-stream" in content_type or "json" not in content_type:
            return None
        try:
            completion = json.loads(response.read(), object_hook=lambda fields: types.SimpleNamespace(**fields))
        except ValueError:
            return None
        with self._lock:
            self._omitted.update(("stream", "stream_options"))
        return completion if isinstance(completion, types.SimpleNamespace) else None

    def _reached_server(self, exc: Any, reply: _Reply) -> bool:
        """Whether a failed try's request got to the server (then the prompt it read is paid for):
        not when the connection was never made (a closed port, an unknown host)."""
        # By name: the client raises its own transport's classes (httpx's, or its fork httpx2's).
        never_sent = {type(exc.__cause__).__name__} & {"ConnectError", "ConnectTimeout"}
        return bool(reply.chunks) or not never_sent

    def _pause(self, seconds: float, stop: Callable[[], bool]) -> None:
        if self._sleep is not None:
            self._sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if stop():
                return
            time.sleep(min(POLL_S, left))

    # -- the reply ---------------------------------------------------------------------------
    def _estimate(self, request: Mapping[str, JsonValue], reply: _Reply) -> Usage:
        """What an abandoned try cost: the prompt the server read, and what it sent so far."""
        usage = Usage(tokens_in=_request_tokens(request),
                      tokens_out=reply.output_chars // 4, estimated=True)
        return Usage(tokens_in=usage.tokens_in, tokens_out=usage.tokens_out, cost_usd=self.pricing.cost(usage),
                     estimated=True)

    def _usage(self, reply: _Reply, request: Mapping[str, JsonValue], calls: Sequence[ToolCall]) -> Usage:
        raw = reply.usage
        tokens_in = getattr(raw, "prompt_tokens", None)
        tokens_out = getattr(raw, "completion_tokens", None)
        if not tokens_in and not tokens_out and reply.output_chars:
            tokens_in = tokens_out = None  # all zeros beside a reply: not counted (LocalAI's usage)
        estimated = tokens_in is None or tokens_out is None
        if tokens_in is None:
            tokens_in = _request_tokens(request)
        if tokens_out is None:
            tokens_out = estimate_text_tokens(reply.content) + estimate_text_tokens(reply.reasoning) + sum(
                estimate_text_tokens(c.raw_arguments) for c in calls)
        cached = _detail(raw, "prompt_tokens_details", "cached_tokens")
        reasoning = _detail(raw, "completion_tokens_details", "reasoning_tokens")
        usage = Usage(tokens_in=int(tokens_in), tokens_out=int(tokens_out), tokens_cached=cached,
                      tokens_reasoning=reasoning, estimated=estimated)
        return Usage(tokens_in=usage.tokens_in, tokens_out=usage.tokens_out, cost_usd=self.pricing.cost(usage),
                     tokens_cached=cached, tokens_reasoning=reasoning, estimated=estimated)

    def _turn(self, reply: _Reply, request: Mapping[str, JsonValue], tools: Sequence[Mapping[str, JsonValue]], *,
              text_mode: bool, latency_ms: float, abandoned: Usage) -> AssistantTurn:
        content: str | None = reply.content or None
        reasoning = reply.reasoning.strip() or None
        if self.profile.strip_think:
            content, thoughts = split_think(content)
            if thoughts:
                reasoning = f"{reasoning}\n\n{thoughts}" if reasoning else thoughts
        cut = reply.finish_reason == "length"
        if text_mode:
            calls = parse_text_tool_calls(content, tools, id_prefix=f"text-{uuid.uuid4().hex[:8]}")
        else:
            calls = tuple(_tool_call(p) for _, p in sorted(reply.calls.items()))
        if cut:
            calls = tuple(_cut_off(c, self.profile.max_output_tokens) if c.error else c for c in calls)
        answered = self._usage(reply, request, calls)
        return AssistantTurn(content=content, tool_calls=calls, usage=answered + abandoned, latency_ms=latency_ms,
                             finish_reason=reply.finish_reason, refusal=reply.refusal or None, reasoning=reasoning,
                             text_mode=text_mode, prompt_tokens=None if answered.estimated else answered.tokens_in)


def _request_tokens(request: Mapping[str, JsonValue]) -> int:
    """`estimate_tokens` of a request body's messages and tools."""
    def objects(key: str) -> list[Mapping[str, JsonValue]]:
        items = request.get(key)
        return [m for m in items if isinstance(m, Mapping)] if isinstance(items, list | tuple) else []

    return estimate_tokens(objects("messages"), objects("tools"))


def _detail(usage: Any, group: str, name: str) -> int:
    details = getattr(usage, group, None)
    value = getattr(details, name, None) if details is not None else None
    if value is None and isinstance(details, Mapping):
        value = details.get(name)
    return int(value or 0)


def _tool_call(partial: _PartialCall) -> ToolCall:
    call_id = partial.id or f"call_{uuid.uuid4().hex[:12]}"
    if partial.arguments_object is not None and not partial.arguments:
        raw_value: Any = partial.arguments_object
        raw_text = json.dumps(raw_value) if isinstance(raw_value, (dict, list)) else str(raw_value)
    else:
        raw_value = raw_text = partial.arguments
    arguments, error = parse_arguments(raw_value)
    if not partial.name:
        error = error or "the call names no function"
        arguments = None if error else arguments
    return ToolCall(id=call_id, name=partial.name, raw_arguments=raw_text, arguments=arguments, error=error)


def _cut_off(call: ToolCall, limit: int | None) -> ToolCall:
    limit_text = f" of {limit} tokens" if limit else ""
    error = (f"your reply was cut off at the output limit{limit_text} in the middle of this call's arguments "
             f"({len(call.raw_arguments)} characters arrived), so it was not run: keep the reasoning before the "
             "call short and send the complete file in one call")
    return ToolCall(id=call.id, name=call.name, raw_arguments=call.raw_arguments, arguments=None, error=error)


def _alternating(messages: list[Message]) -> list[JsonValue]:
    """The history with consecutive user messages joined, as strict chat templates require
    ("Conversation roles must alternate user/assistant/user/assistant/...")."""
    out: list[Message] = []
    for message in messages:
        previous = out[-1] if out else None
        if (previous is not None and message.get("role") == "user" and previous.get("role") == "user"
                and isinstance(previous.get("content"), str) and isinstance(message.get("content"), str)):
            out[-1] = {**previous, "content": f"{previous['content']}\n\n{message['content']}"}
        else:
            out.append(message)
    return list(out)


def _close_quietly(stream: Any) -> None:
    # Closing a broken connection may fail; the call is abandoned either way.
    with contextlib.suppress(Exception):
        stream.close()
