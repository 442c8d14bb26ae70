"""A small HTTP server on 127.0.0.1 for the test servers: a thread, quiet logs, POST bodies handed on.

`StubChatServer` and `FakeLLMServer` subclass `LocalPostServer` and implement `handle_post`; a
body is JSON on the wire (`parse_body` reads it as a `JsonObject`).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self

from vocabulary.wire import JsonObject

__all__ = ["LocalPostServer", "parse_body"]


def parse_body(raw: bytes) -> JsonObject | None:
    """A request body as a JSON object (an empty body is ``{}``); None if it is not one."""
    try:
        value = json.loads(raw or b"{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class LocalPostServer:
    """Serves POST requests on 127.0.0.1 (a free port) from a daemon thread until `stop`."""

    def __init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def handle_post(self, handler: BaseHTTPRequestHandler, raw: bytes) -> None:
        """Answer one POST (``raw``: its body) through ``handler``."""
        raise NotImplementedError

    def start(self) -> Self:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                owner.handle_post(self, self.rfile.read(length) if length else b"")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=type(self).__name__, daemon=True)
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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """The Chat Completions base URL (``…/v1``) of the running server."""
        if self._server is None:
            raise RuntimeError(f"the {type(self).__name__} is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"
