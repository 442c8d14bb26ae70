"""`MemoryRecorder`: the `Recorder` protocol over lists, for tests and the offline demo."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vocabulary.verdict import ErrorKind, Verdict, source_sha256
from vocabulary.wire import JsonObject

__all__ = ["MemoryRecorder", "RecordedAttempt", "RecordedMessage", "RecordedStart", "RecordedUsage"]


@dataclass(frozen=True)
class RecordedMessage:
    trajectory_index: int
    role: str
    content: str | None
    tool_calls: list[JsonObject] | None
    tool_call_id: str | None
    tokens_in: int
    tokens_out: int
    latency_ms: float
    cost_usd: float
    tokens_reasoning: int = 0
    tokens_cached: int = 0


@dataclass(frozen=True)
class RecordedStart:
    """A trajectory's start: its sampling temperature and strategy hint."""

    temperature: float
    strategy: str


@dataclass(frozen=True)
class RecordedUsage:
    trajectory_index: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    tokens_reasoning: int = 0
    tokens_cached: int = 0


@dataclass(frozen=True)
class RecordedAttempt:
    n: int
    trajectory_index: int
    tool: str
    source: str
    sha256: str
    parent_sha256: str | None
    verdict: Verdict


@dataclass
class MemoryRecorder:
    """Keeps everything in order; ``cancel()`` (or ``cancel_when``) makes `cancelled` true."""

    cancel_when: Callable[[MemoryRecorder], bool] | None = None
    messages: list[RecordedMessage] = field(default_factory=list)
    #: Usage recorded apart from messages (abandoned or failed LLM calls).
    usages: list[RecordedUsage] = field(default_factory=list)
    attempts: list[RecordedAttempt] = field(default_factory=list)
    started: dict[int, RecordedStart] = field(default_factory=dict)
    finished: dict[int, str] = field(default_factory=dict)
    #: Every call, as (method, trajectory index or None), in order.
    events: list[tuple[str, int | None]] = field(default_factory=list)
    _cancelled: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def cancel(self) -> None:
        self._cancelled = True

    def trajectory_started(self, *, index: int, temperature: float, strategy: str) -> None:
        with self._lock:
            self.started[index] = RecordedStart(temperature=temperature, strategy=strategy)
            self.events.append(("trajectory_started", index))

    def message(self, *, trajectory_index: int, role: str, content: str | None, tool_calls: Sequence[JsonObject] | None,
                tool_call_id: str | None, tokens_in: int, tokens_out: int, latency_ms: float,
                cost_usd: float, tokens_reasoning: int = 0, tokens_cached: int = 0) -> None:
        with self._lock:
            calls = list(tool_calls) if tool_calls is not None else None
            self.messages.append(RecordedMessage(trajectory_index, role, content, calls, tool_call_id, tokens_in,
                                                 tokens_out, latency_ms, cost_usd, tokens_reasoning, tokens_cached))
            self.events.append(("message", trajectory_index))

    def usage(self, *, trajectory_index: int, tokens_in: int, tokens_out: int, cost_usd: float,
              tokens_reasoning: int = 0, tokens_cached: int = 0) -> None:
        with self._lock:
            self.usages.append(RecordedUsage(trajectory_index, tokens_in, tokens_out, cost_usd, tokens_reasoning,
                                             tokens_cached))
            self.events.append(("usage", trajectory_index))

    def find_attempt(self, *, source_sha256: str, tool: str) -> Verdict | None:
        with self._lock:
            for attempt in reversed(self.attempts):
                if (attempt.sha256 == source_sha256 and attempt.tool == tool
                        and attempt.verdict.error_kind not in (ErrorKind.INFRA, ErrorKind.CANCELLED)):
                    return attempt.verdict
        return None

    def attempt(self, *, trajectory_index: int, tool: str, source: str, parent_sha256: str | None,
                verdict: Verdict) -> None:
        with self._lock:
            sha = source_sha256(source)
            self.attempts.append(RecordedAttempt(len(self.attempts) + 1, trajectory_index, tool, source, sha,
                                                 parent_sha256, verdict))
            self.events.append(("attempt", trajectory_index))

    def trajectory_finished(self, *, index: int, reason: str) -> None:
        with self._lock:
            self.finished[index] = reason
            self.events.append(("trajectory_finished", index))

    def cancelled(self) -> bool:
        if not self._cancelled and self.cancel_when is not None and self.cancel_when(self):
            self._cancelled = True
        return self._cancelled

    # -- views for assertions ----------------------------------------------------------------
    def messages_of(self, trajectory_index: int) -> list[RecordedMessage]:
        return [m for m in self.messages if m.trajectory_index == trajectory_index]

    def tool_results(self, trajectory_index: int = 0) -> list[str]:
        return [m.content or "" for m in self.messages_of(trajectory_index) if m.role == "tool"]
