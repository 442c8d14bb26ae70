"""A local HTTP server speaking the Chat Completions protocol, scripted by a queue of responses.

For tests that drive the real ``openai`` client over HTTP on 127.0.0.1: tool calls, usage, and
error injection (429 with ``Retry-After``, 5xx, malformed tool-call arguments, unknown tools, plain
text, refusals, context-length errors). Every request body it receives is kept for assertions.
Streaming is not supported (the agent does not stream).

    with StubChatServer([StubResponse.tool_calls(("get_gpu_specs", {}))]) as server:
        client = OpenAI(base_url=server.base_url, api_key="none")
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.support.doubles.localhttp import LocalPostServer, parse_body
from vocabulary.wire import JsonObject

__all__ = ["StubChatServer", "StubResponse"]

_CALL_IDS = itertools.count(1)


@dataclass(frozen=True)
class StubResponse:
    """One scripted HTTP answer. ``body`` is JSON-encoded unless it is already a string."""

    status: int = 200
    body: JsonObject | str = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering (to trigger client timeouts).
    delay_s: float = 0.0

    # -- successful completions ----------------------------------------------------------------
    @classmethod
    def completion(cls, message: JsonObject, *, finish_reason: str, usage: tuple[int, int] | None = (120, 40),
                   model: str = "stub-model") -> StubResponse:
        body: JsonObject = {
            "id": f"chatcmpl-{next(_CALL_IDS)}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason,
                         "logprobs": None}],
        }
        if usage is not None:
            body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                             "total_tokens": usage[0] + usage[1]}
        return cls(body=body)

    @classmethod
    def tool_calls(cls, *calls: tuple[str, JsonObject | str], content: str | None = None,
                   usage: tuple[int, int] | None = (120, 40)) -> StubResponse:
        """Function calls; arguments given as a str are sent as is (malformed JSON, for instance)."""
        entries: list[JsonObject] = [{"id": f"call_{next(_CALL_IDS)}", "type": "function",
                    "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                   for name, args in calls]
        return cls.completion({"content": content, "tool_calls": entries}, finish_reason="tool_calls", usage=usage)

    @classmethod
    def text(cls, content: str, *, usage: tuple[int, int] | None = (120, 40),
             finish_reason: str = "stop") -> StubResponse:
        return cls.completion({"content": content}, finish_reason=finish_reason, usage=usage)

    @classmethod
    def refusal(cls, text: str = "I can't help with that.") -> StubResponse:
        return cls.completion({"content": None, "refusal": text}, finish_reason="stop")

    # -- errors ----------------------------------------------------------------------------------
    @classmethod
    def error(cls, status: int, message: str, *, code: str | None = None, type_: str = "server_error",
              headers: dict[str, str] | None = None) -> StubResponse:
        return cls(status=status, body={"error": {"message": message, "type": type_, "code": code, "param": None}},
                   headers=dict(headers or {}))

    @classmethod
    def rate_limited(cls, retry_after: float = 0.0) -> StubResponse:
        return cls.error(429, "Rate limit reached for requests", code="rate_limit_exceeded", type_="requests",
                         headers={"retry-after": f"{retry_after:g}"})

    @classmethod
    def server_error(cls, status: int = 500) -> StubResponse:
        return cls.error(status, "The server had an error while processing your request.")

    @classmethod
    def context_overflow(cls, limit: int = 8192, over: int = 1234) -> StubResponse:
        return cls.error(400, f"This model's maximum context length is {limit} tokens. However, your messages "
                         f"resulted in {limit + over} tokens. Please reduce the length of the messages.",
                         code="context_length_exceeded", type_="invalid_request_error")


Responder = StubResponse | Callable[[JsonObject], StubResponse]


class StubChatServer(LocalPostServer):
    """Serves ``POST /v1/chat/completions`` from a queue; an empty queue answers 500.

    Args:
        responses: the script, in order; a callable gets the request body and returns a response.
    """

    def __init__(self, responses: Iterable[Responder] = ()) -> None:
        super().__init__()
        self._queue: deque[Responder] = deque(responses)
        self._lock = threading.Lock()
        self.requests: list[JsonObject] = []
        self.paths: list[str] = []
        #: Request headers, names lower-cased.
        self.headers: list[dict[str, str]] = []

    def handle_post(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        body = parse_body(raw)
        if body is None:
            body = {"_unparsed": raw.decode(errors="replace")}
        response = self._next(handler.path, body, {k.lower(): v for k, v in handler.headers.items()})
        if response.delay_s:
            time.sleep(response.delay_s)
        payload = response.body if isinstance(response.body, str) else json.dumps(response.body)
        data = payload.encode()
        handler.send_response(response.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in response.headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    # -- the script ------------------------------------------------------------------------------
    def enqueue(self, *responses: Responder) -> None:
        with self._lock:
            self._queue.extend(responses)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._queue)

    def _next(self, path: str, body: JsonObject, headers: dict[str, str]) -> StubResponse:
        with self._lock:
            self.requests.append(body)
            self.paths.append(path)
            self.headers.append(headers)
            if path.rstrip("/") != "/v1/chat/completions":
                return StubResponse.error(404, f"stub: no route {path}", type_="not_found")
            if not self._queue:
                return StubResponse.server_error()
            responder = self._queue.popleft()
        return responder(body) if callable(responder) else responder
