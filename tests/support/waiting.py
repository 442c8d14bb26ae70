"""Waiting for a condition (stdlib only)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.1, what: str = "") -> Any:
    """``predicate()``'s first true value, polled every ``interval`` seconds; an `AssertionError`
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")
        time.sleep(interval)
