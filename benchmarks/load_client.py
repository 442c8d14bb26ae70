"""The load run's submitting clients: ``python -m benchmarks.load_client``, one process each,
standard library only (started in a fraction of a second, nothing imported that it does not use).

`benchmarks.load_service` starts several, so that 200 submissions sent at once are sent and read
by as many event loops as there are processes, as 200 separate clients would be, and so that the
client that opens the watchers' streams does not delay reading the answers. The protocol, JSON
lines:

- stdin, first line: ``{"port", "path", "payload", "rate", "jobs": [[index, key], ...]}``;
- stdout: ``{"ready": true}`` once started; then, after the line ``{"go": <wall clock>}`` on stdin,
  one line per submission as its answer arrives: ``{"i", "latency_s", "status", "body",
  "server_timing"}`` (the answer's ``Server-Timing`` header, "" if none), or
  ``{"i", "error"}`` when the connection or the answer went wrong. The process exits after the
  last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

__all__ = ["main", "post"]

HOST = "127.0.0.1"
#: Bound of one submission, connection and answer.
SUBMIT_TIMEOUT_S = 60.0


async def post(port: int, path: str, payload: bytes, key: str) -> tuple[int, bytes, str]:
    """``POST`` one JSON body on a connection of its own and read the answer: status, body and
    its ``Server-Timing`` header.
    A minimal HTTP/1.1 client: httpx spent ~12 ms of CPU per request in a burst of 200 (its
    connection pool scans every connection for every request), three times the API's own cost;
    this spends ~0.5 ms.

    Raises:
        OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError:
        as the connection or the answer went wrong.
    """
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        head = (f"POST {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nX-API-Key: {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n")
        writer.write(head.encode() + payload)
        headers = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(headers[0].split(" ", 2)[1])
        fields = {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in headers[1:])}
        length = fields.get("content-length")
        content = await (reader.readexactly(int(length)) if length else reader.read())
        return status, content, fields.get("server-timing", "")
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def _submit(order: dict[str, Any], go: float) -> None:
    payload = order["payload"].encode()
    rate = order["rate"]

    async def one(i: int, key: str) -> None:
        await asyncio.sleep(max(0.0, go + (i / rate if rate else 0.0) - time.time()))
        started = time.perf_counter()
        try:
            answer = post(order["port"], order["path"], payload, key)
            status, body, timing = await asyncio.wait_for(answer, SUBMIT_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError, IndexError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError) as exc:
            _emit({"i": i, "error": f"{type(exc).__name__}: {exc}"})
            return
        _emit({"i": i, "latency_s": time.perf_counter() - started, "status": status,
               "body": body.decode(errors="replace"), "server_timing": timing})

    await asyncio.gather(*(one(i, key) for i, key in order["jobs"]))


def main() -> int:
    order = json.loads(sys.stdin.readline())
    _emit({"ready": True})
    go = float(json.loads(sys.stdin.readline())["go"])
    asyncio.run(_submit(order, go))
    return 0


if __name__ == "__main__":
    sys.exit(main())
