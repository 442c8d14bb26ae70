"""One timing run per device at a time: a file lock per device under the harness cache.

Timing (``benchmark``) and profiling share the device with nothing else, or their numbers mean
little; compiles (no device) and the correctness trials need no exclusivity and overlap freely.
The lock is ``flock(2)`` on ``<cache_dir>/locks/<device>.lock``: held by an open file
description, so it serialises threads of one worker as well as worker processes sharing a GPU,
and the kernel drops it when its holder dies: a killed worker leaves no lock behind.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["current_device_key", "device_key", "device_lock"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def device_key(target: str, cuda_visible_devices: str | None) -> str:
    """The name of the lock guarding the device a job of ``target`` is timed on.

    Args:
        target: ``cuda`` or ``cpu``.
        cuda_visible_devices: the worker's ``CUDA_VISIBLE_DEVICES`` (an index or a GPU UUID;
            ``None`` or empty: every GPU of the host, one lock for all of them).
    """
    if target != "cuda":
        return "cpu"
    devices = (cuda_visible_devices or "").strip()
    return "gpu-" + (_UNSAFE.sub("_", devices) if devices else "all")


def current_device_key(target: str) -> str:
    """`device_key` for this process's ``CUDA_VISIBLE_DEVICES``."""
    return device_key(target, os.environ.get("CUDA_VISIBLE_DEVICES"))


@contextmanager
def device_lock(cache_dir: Path, key: str) -> Iterator[float]:
    """Hold the device's lock for the block; yields the seconds spent waiting for it."""
    directory = cache_dir / "locks"
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    fd = os.open(directory / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield time.monotonic() - started
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
