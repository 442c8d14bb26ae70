"""A small record on the trusted side's disk: a JSON list of entries, the latest ``limit`` kept.

Read tolerantly (a missing or torn file is empty, an entry that does not parse is skipped: the
record only ever advises), appended under an exclusive lock (concurrent jobs of one machine share
it) and replaced atomically. Standard library only: the baseline record and the device record use it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from vocabulary.wire import JsonObject, WireError

__all__ = ["RecordFile"]

Entry = TypeVar("Entry")


class RecordFile(Generic[Entry]):
    def __init__(self, path: Path, *, parse: Callable[[object], Entry], dump: Callable[[Entry], JsonObject],
                 limit: int) -> None:
        self.path = path
        self._parse = parse
        self._dump = dump
        self._limit = limit

    def read(self) -> list[Entry]:
        try:
            raw = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return []
        entries = []
        for item in raw if isinstance(raw, list) else ():
            with contextlib.suppress(WireError, ValueError, TypeError, KeyError):
                entries.append(self._parse(item))
        return entries

    def append(self, entry: Entry) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if we die
            entries = [*self.read(), entry][-self._limit:]
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps([self._dump(e) for e in entries]))
            tmp.replace(self.path)
