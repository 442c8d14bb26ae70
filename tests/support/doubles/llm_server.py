"""The machinery of the fake LLM servers: HTTP, Server-Sent Events, a token count, a script.

A `FakeLLMServer` serves ``POST /v1/chat/completions`` on 127.0.0.1 for the real ``openai``
client. Each request is first checked the way the real server kind checks it (`validate`: the
subclasses in `tests.support.doubles.servers` reproduce OpenAI's, vLLM's, SGLang's, llama.cpp's and
Ollama's validation, errors and chunk formats), then answered from the script: a `Reply` (what
the model "says": content, reasoning, tool calls, how it is cut) or a `Failure` (an HTTP error),
or a callable that makes one from the request. Replies are sent as one JSON body or, when the
request streams, as ``chat.completion.chunk`` events, with per-chunk delays to play slow models.

The servers count tokens with a crude tokenizer of their own (words and punctuation marks), so a
client's character-based estimate is wrong in the way a real tokenizer makes it wrong, and they
keep every request for assertions.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from agent.providers.base import call_function, message_calls
from tests.support.doubles.localhttp import LocalPostServer, parse_body
from vocabulary.wire import JsonObject, JsonValue

__all__ = [
    "Call",
    "Failure",
    "FakeLLMServer",
    "Reply",
    "count_tokens",
    "prompt_tokens",
    "request_messages",
    "requested_output_tokens",
    "roles_alternate",
]

_IDS = itertools.count(1)
_TOKEN = re.compile(r"\w+|[^\w\s]")
#: Characters per streamed content or argument piece.
PIECE_CHARS = 48
#: Tokens a chat template adds per message (role markers and separators).
TEMPLATE_TOKENS_PER_MESSAGE = 4


def count_tokens(text: str) -> int:
    """The fake servers' token count: words and punctuation marks (code comes out near 3
    characters a token, as real tokenizers count it)."""
    return len(_TOKEN.findall(text))


def _message_text(message: Mapping[str, JsonValue]) -> str:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content) if content else ""
    for call in message_calls(message):
        function = call_function(call)
        arguments = function.get("arguments")
        text += f" {function.get('name', '')} " + (arguments if isinstance(arguments, str) else json.dumps(arguments))
    return text


def request_messages(body: Mapping[str, JsonValue]) -> list[Mapping[str, JsonValue]]:
    """A request body's ``messages`` (those that are objects)."""
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, Mapping)] if isinstance(messages, list | tuple) else []


def requested_output_tokens(body: Mapping[str, JsonValue]) -> int:
    """The request's output limit (``max_completion_tokens``, else ``max_tokens``); 0 if none."""
    value = body.get("max_completion_tokens") or body.get("max_tokens")
    return int(value) if isinstance(value, int | float | str) and value else 0


def prompt_tokens(body: Mapping[str, JsonValue]) -> list[str]:
    """The request's prompt as tokens, in order (the tools first, as templates render them)."""
    tokens: list[str] = []
    if body.get("tools"):
        tokens.extend(_TOKEN.findall(json.dumps(body["tools"])))
    for message in request_messages(body):
        tokens.extend([f"<|{message.get('role')}|>"] * TEMPLATE_TOKENS_PER_MESSAGE)
        tokens.extend(_TOKEN.findall(_message_text(message)))
    return tokens


@dataclass(frozen=True)
class Call:
    """A tool call the fake model makes; ``arguments`` given as a str are sent as they are
    (cut-off or malformed JSON), a dict is JSON-encoded, unless ``as_object``: then it is sent as
    a JSON object where the protocol has a string (as some servers and proxies do)."""

    name: str
    arguments: str | JsonObject
    as_object: bool = False


@dataclass(frozen=True)
class Reply:
    """What the fake model answers.

    Args:
        content: the visible text (a ``<think>`` block in it is sent as it is).
        reasoning: reasoning the server returns apart (in its reasoning field); a server kind
            without one (OpenAI's reasoning models) only counts it as reasoning tokens.
        calls: tool calls.
        finish_reason: default ``tool_calls`` with calls, else ``stop``.
        refusal: OpenAI's ``refusal`` field.
        delay_s: seconds before the first byte.
        chunk_delay_s: seconds between streamed chunks.
        usage: send usage (a server that sends none makes the client estimate).
    """

    content: str | None = None
    reasoning: str | None = None
    calls: tuple[Call, ...] = ()
    finish_reason: str | None = None
    refusal: str | None = None
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    usage: bool = True

    @property
    def finish(self) -> str:
        return self.finish_reason or ("tool_calls" if self.calls else "stop")

    def completion_tokens(self) -> int:
        text = (self.content or "") + (self.reasoning or "") + "".join(
            c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments) for c in self.calls)
        return count_tokens(text)


@dataclass(frozen=True)
class Failure:
    """An HTTP error answer (``body`` JSON-encoded unless a str)."""

    status: int
    body: JsonObject | str
    headers: dict[str, str] = field(default_factory=dict)


Step = Reply | Failure | Callable[[JsonObject], "Reply | Failure"]


@dataclass
class _Exchange:
    """One request as the server saw it, and how it answered."""

    body: JsonObject
    headers: dict[str, str]
    status: int = 200
    prompt_tokens: int = 0
    cached_tokens: int = 0
    #: The client went away before the reply was complete.
    disconnected: bool = False


class FakeLLMServer(LocalPostServer):
    """A Chat Completions server on 127.0.0.1 that answers from a script, the way its kind does.

    Subclasses override `validate` (a real server's checks, before any generation), `error`
    (its error body), and the class attributes below (its reply format).

    Args:
        script: what to answer, in order; an exhausted script answers 500.
        model: the model name it reports.
        context_window: the context the server was started with (tokens).
    """

    #: Where the server returns reasoning apart from the content (None: nowhere).
    reasoning_field: str | None = "reasoning_content"
    #: With no reasoning field: the reasoning stays in the content as a ``<think>`` block (a
    #: server without a reasoning parser), or is hidden (OpenAI's reasoning models).
    reasoning_in_content: bool = False
    #: Streams when asked (False: a server that ignores ``"stream": true`` and answers one JSON body).
    streams: bool = True
    #: Counts tokens (False: a usage of zeros, as servers that do not count send it).
    counts_tokens: bool = True
    #: Tool-call arguments streamed in pieces (False: each call whole, in one chunk).
    incremental_tool_calls: bool = True
    #: Usage in a chunk of its own with empty ``choices`` (True) or on the finishing chunk (False).
    usage_chunk_apart: bool = True
    #: Usage only when ``stream_options.include_usage`` asks for it (streaming).
    usage_needs_include: bool = True
    #: Report the prompt tokens served from a prefix cache (``prompt_tokens_details.cached_tokens``).
    reports_cached_tokens: bool = False
    #: Prefix caching in blocks of this many tokens (and only past ``cache_min_tokens``).
    cache_block: int = 16
    cache_min_tokens: int = 0

    def __init__(self, script: Iterable[Step] = (), *, model: str = "fake-model",
                 context_window: int = 32_768) -> None:
        super().__init__()
        self.model = model
        self.context_window = context_window
        self._queue: deque[Step] = deque(script)
        self._lock = threading.Lock()
        self.exchanges: list[_Exchange] = []
        self._previous_prompt: list[str] = []

    # -- the kind's behaviour (overridden) -----------------------------------------------------
    def error(self, status: int, message: str, *, headers: Mapping[str, str] | None = None,
              **fields: JsonValue) -> Failure:
        """The server's error answer (OpenAI's ``{"error": {...}}`` shape by default)."""
        error: JsonObject = {"message": message, "type": "invalid_request_error", "param": None, "code": None,
                             **fields}
        return Failure(status, {"error": error}, headers=dict(headers or {}))

    def validate(self, body: JsonObject, tokens: int) -> Failure | None:
        """Refuse the request as the real server would, before generating (None: accepted)."""
        return None

    def prepare(self, body: JsonObject) -> JsonObject:
        """The request as the server goes on to use it (e.g. silently truncated); default: as sent."""
        return body

    # -- the script ------------------------------------------------------------------------------
    def enqueue(self, *steps: Step) -> None:
        with self._lock:
            self._queue.extend(steps)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[JsonObject]:
        return [e.body for e in self.exchanges]

    @property
    def statuses(self) -> list[int]:
        return [e.status for e in self.exchanges]

    def _next(self, body: JsonObject) -> Reply | Failure:
        with self._lock:
            step = self._queue.popleft() if self._queue else None
        if step is None:
            return self.error(500, "the fake server's script is exhausted", type="server_error")
        return step(body) if callable(step) else step

    # -- one request -----------------------------------------------------------------------------
    def handle_post(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        body = parse_body(raw) or {}
        exchange = _Exchange(body=body, headers=headers)
        with self._lock:
            self.exchanges.append(exchange)
        if handler.path.rstrip("/") != "/v1/chat/completions":
            self._send_failure(handler, exchange, self.error(404, f"no route {handler.path}", type="not_found_error"))
            return
        tokens = prompt_tokens(body)
        failure = self.validate(body, len(tokens))
        if failure is not None:
            self._send_failure(handler, exchange, failure)
            return
        used = self.prepare(body)
        tokens = prompt_tokens(used) if used is not body else tokens
        exchange.prompt_tokens = len(tokens)
        exchange.cached_tokens = self._cached(tokens)
        answer = self._next(body)
        if isinstance(answer, Failure):
            self._send_failure(handler, exchange, answer)
            return
        if answer.delay_s:
            time.sleep(answer.delay_s)
        try:
            if body.get("stream") and self.streams:
                self._send_stream(handler, exchange, answer)
            else:
                self._send_json(handler, 200, self._completion(body, answer, exchange))
        except (BrokenPipeError, ConnectionResetError):
            exchange.disconnected = True

    def _cached(self, tokens: list[str]) -> int:
        with self._lock:
            previous, self._previous_prompt = self._previous_prompt, tokens
        common = 0
        for a, b in zip(previous, tokens, strict=False):
            if a != b:
                break
            common += 1
        common = min(common, max(0, len(tokens) - 1))
        if common < self.cache_min_tokens:
            return 0
        return common - common % self.cache_block

    def _usage(self, body: Mapping[str, JsonValue], reply: Reply, exchange: _Exchange) -> JsonObject:
        if not self.counts_tokens:
            return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        completion = reply.completion_tokens()
        usage: JsonObject = {"prompt_tokens": exchange.prompt_tokens, "completion_tokens": completion,
                                 "total_tokens": exchange.prompt_tokens + completion}
        if self.reports_cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": exchange.cached_tokens}
        if reply.reasoning and self.reasoning_field is None and not self.reasoning_in_content:
            usage["completion_tokens_details"] = {"reasoning_tokens": count_tokens(reply.reasoning)}
        return usage

    def _calls_json(self, reply: Reply, *, with_index: bool) -> list[JsonObject]:
        return [self._call_json(call, index=i if with_index else None) for i, call in enumerate(reply.calls)]

    @staticmethod
    def _call_json(call: Call, *, index: int | None, call_id: str | None = None) -> JsonObject:
        """One ``tool_calls`` entry (``index``: as streamed chunks carry it)."""
        arguments: JsonValue = call.arguments
        if not isinstance(arguments, str) and not call.as_object:
            arguments = json.dumps(arguments)
        entry: JsonObject = {"id": call_id or f"call_{next(_IDS)}", "type": "function",
                             "function": {"name": call.name, "arguments": arguments}}
        if index is not None:
            entry["index"] = index
        return entry

    def _content(self, reply: Reply) -> str | None:
        if reply.reasoning and self.reasoning_field is None and self.reasoning_in_content:
            return f"<think>\n{reply.reasoning}\n</think>\n\n{reply.content or ''}"
        return reply.content

    def _message(self, reply: Reply) -> JsonObject:
        message: JsonObject = {"role": "assistant", "content": self._content(reply)}
        if reply.reasoning and self.reasoning_field:
            message[self.reasoning_field] = reply.reasoning
        if reply.calls:
            message["tool_calls"] = self._calls_json(reply, with_index=False)
        if reply.refusal is not None:
            message["refusal"] = reply.refusal
        return message

    def _completion(self, body: Mapping[str, JsonValue], reply: Reply, exchange: _Exchange) -> JsonObject:
        completion: JsonObject = {
            "id": f"chatcmpl-{next(_IDS)}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": self._message(reply), "finish_reason": reply.finish, "logprobs": None}],
        }
        if reply.usage:
            completion["usage"] = self._usage(body, reply, exchange)
        return completion

    def chunks(self, body: Mapping[str, JsonValue], reply: Reply, exchange: _Exchange) -> Iterator[JsonObject]:
        """The reply as ``chat.completion.chunk`` objects, in order."""
        base: JsonObject = {"id": f"chatcmpl-{next(_IDS)}", "object": "chat.completion.chunk",
                            "created": int(time.time()), "model": self.model}

        def chunk(delta: JsonObject, finish: str | None = None, **extra: JsonValue) -> JsonObject:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                    **extra}

        yield chunk({"role": "assistant", "content": ""})
        if reply.reasoning and self.reasoning_field:
            for piece in _pieces(reply.reasoning):
                yield chunk({self.reasoning_field: piece})
        for piece in _pieces(self._content(reply) or ""):
            yield chunk({"content": piece})
        if reply.refusal:
            yield chunk({"refusal": reply.refusal})
        for i, call in enumerate(reply.calls):
            entry = self._call_json(call, index=i)
            arguments = call_function(entry).get("arguments")
            if not self.incremental_tool_calls or not isinstance(arguments, str):
                yield chunk({"tool_calls": [entry]})
                continue
            yield chunk({"tool_calls": [{"index": i, "id": entry["id"], "type": "function",
                                         "function": {"name": call.name, "arguments": ""}}]})
            for piece in _pieces(arguments):
                yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        stream_options = body.get("stream_options")
        include = isinstance(stream_options, Mapping) and bool(stream_options.get("include_usage"))
        send_usage = reply.usage and (include or not self.usage_needs_include)
        if send_usage and not self.usage_chunk_apart:
            yield chunk({}, reply.finish, usage=self._usage(body, reply, exchange))
            return
        yield chunk({}, reply.finish)
        if send_usage:
            yield {**base, "choices": [], "usage": self._usage(body, reply, exchange)}

    # -- the wire --------------------------------------------------------------------------------
    def _send_json(self, handler: BaseHTTPRequestHandler, status: int, payload: JsonObject | str,
                   headers: Mapping[str, str] | None = None) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json" if not isinstance(payload, str) else "text/plain")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def _send_failure(self, handler: BaseHTTPRequestHandler, exchange: _Exchange, failure: Failure) -> None:
        exchange.status = failure.status
        try:
            self._send_json(handler, failure.status, failure.body, failure.headers)
        except (BrokenPipeError, ConnectionResetError):
            exchange.disconnected = True

    def _send_stream(self, handler: BaseHTTPRequestHandler, exchange: _Exchange, reply: Reply) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        for i, chunk in enumerate(self.chunks(exchange.body, reply, exchange)):
            if i and reply.chunk_delay_s:
                time.sleep(reply.chunk_delay_s)
            handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            handler.wfile.flush()
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()


def _pieces(text: str) -> Sequence[str]:
    return [text[i:i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)]


def roles_alternate(messages: Sequence[Mapping[str, JsonValue]], *, allow_tools: bool) -> str | None:
    """Why the roles break a strict template's alternation, or None.

    After an optional system message: user first, then user and assistant in turn; with
    ``allow_tools``, tool results may follow an assistant message that made calls (Mistral-style
    templates); without, any other role breaks it (Llama-2/Gemma-style templates).
    """
    roles = [str(m.get("role")) for m in messages]
    if roles and roles[0] == "system":
        roles = roles[1:]
    expected = "user"
    previous = None
    for role in roles:
        if role == "tool" and allow_tools and previous in ("assistant", "tool"):
            previous = "tool"
            expected = "user_or_assistant"
            continue
        if expected == "user_or_assistant":
            if role not in ("user", "assistant"):
                return role
            expected = "assistant" if role == "user" else "user"
        elif role != expected:
            return role
        else:
            expected = "assistant" if role == "user" else "user"
        previous = role
    return None
