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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StubChatServer", "StubResponse"]

_CALL_IDS = itertools.count(1)


@dataclass(frozen=True)
class StubResponse:
    """One scripted HTTP answer. ``body`` is JSON-encoded unless it is already a string."""

    status: int = 200
    body: dict[str, Any] | str = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering (to trigger client timeouts).
    delay_s: float = 0.0

    # -- successful completions ----------------------------------------------------------------
    @classmethod
    def completion(cls, message: dict[str, Any], *, finish_reason: str, usage: tuple[int, int] | None = (120, 40),
                   model: str = "stub-model") -> StubResponse:
        body: dict[str, Any] = {
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
    def tool_calls(cls, *calls: tuple[str, dict[str, Any] | str], content: str | None = None,
                   usage: tuple[int, int] | None = (120, 40)) -> StubResponse:
        """Function calls; arguments given as a str are sent as is (malformed JSON, for instance)."""
        entries = [{"id": f"call_{next(_CALL_IDS)}", "type": "function",
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


Responder = StubResponse | Callable[[dict[str, Any]], StubResponse]


class StubChatServer:
    """Serves ``POST /v1/chat/completions`` from a queue; an empty queue answers 500.

    Args:
        responses: the script, in order; a callable gets the request body and returns a response.
    """

    def __init__(self, responses: Iterable[Responder] = ()) -> None:
        self._queue: deque[Responder] = deque(responses)
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        #: Request headers, names lower-cased.
        self.headers: list[dict[str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> StubChatServer:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"_unparsed": raw.decode(errors="replace")}
                response = stub._next(self.path, body, {k.lower(): v for k, v in self.headers.items()})
                if response.delay_s:
                    time.sleep(response.delay_s)
                payload = response.body if isinstance(response.body, str) else json.dumps(response.body)
                data = payload.encode()
                self.send_response(response.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in response.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="stub-chat-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> StubChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the script ------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the stub server is not started")
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/v1"

    def enqueue(self, *responses: Responder) -> None:
        with self._lock:
            self._queue.extend(responses)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._queue)

    def _next(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> StubResponse:
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
