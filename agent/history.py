"""The conversation a trajectory sends: bounded by the profile's window by construction.

A `History` is the list of messages sent to the model, kept so that

- it always fits: before every call its estimated size plus the reply's reserve is checked
  against the window, and the estimate is calibrated against the prompt tokens servers report;
- it is append-only almost always: new turns are added at the end and nothing before them
  changes, so providers' prompt caches keep serving the prefix;
- when it would not fit, it is compacted once, in a large step (to ``LOW_WATER`` of the room),
  into: the system message; the problem message with a summary appended (every attempt as a
  short reference: source hash, verdict, what changed; the best and the latest sources
  verbatim); and the last turns verbatim, their older sources replaced by references;
- it never holds two user messages in a row (the summary rides on the problem message).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.feedback import AttemptNote
from agent.providers.base import Message, call_function, estimate_tokens, message_calls, text_field
from vocabulary.wire import JsonValue

__all__ = [
    "HIGH_WATER",
    "INITIAL_TOKEN_FACTOR",
    "KEEP_TURNS",
    "LOW_WATER",
    "History",
    "HistoryTooLong",
    "SummaryFacts",
    "parse_overflow_tokens",
]

#: A compaction keeps turns in at most this share of the space the head leaves: large steps, so
#: compactions are rare and the prefix stays cacheable between them.
LOW_WATER = 0.55
#: The history is compacted when it would pass this share of the room (the rest is margin for
#: the estimate's error).
HIGH_WATER = 0.92
#: Turns kept verbatim by a compaction, at most (fewer when they do not fit).
KEEP_TURNS = 3
#: The estimate (4 characters a token) times this, until a server reports real counts: code
#: runs nearer 3 characters a token.
INITIAL_TOKEN_FACTOR = 1.35
#: Margin on the factor learned from reported usage.
CALIBRATION_MARGIN = 1.05
#: Tokens kept free besides the reply's reserve (chat-template framing, the nudge).
FRAMING_TOKENS = 256
#: A server that refused a request without saying its window is taken to have room for this
#: share of the messages refused.
OVERFLOW_SHRINK = 0.8

_REFERENCE = "[source {sha}: see attempt {n} in the summary]"
_OVERFLOW_COUNTS = (
    # vLLM: "...maximum context length is 8192 tokens. However, your request has 9100 input tokens"
    re.compile(r"maximum context length is (\d+) tokens.*?(\d+) (?:input )?tokens", re.IGNORECASE | re.DOTALL),
    # llama.cpp: "request (9100 tokens) exceeds the available context size (8192 tokens)"
    re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)", re.IGNORECASE),
    # SGLang: "The input (9100 tokens) is longer than the model's context length (8192 tokens)"
    re.compile(r"input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)",
               re.IGNORECASE),
)


class HistoryTooLong(Exception):
    """Even the most compact history does not fit the window."""


def parse_overflow_tokens(text: str) -> tuple[int, int] | None:
    """(prompt tokens, window) from a context-length error, when the server states both."""
    for pattern in _OVERFLOW_COUNTS:
        match = pattern.search(text)
        if match:
            a, b = int(match.group(1)), int(match.group(2))
            return (b, a) if "maximum context length" in pattern.pattern else (a, b)
    return None


@dataclass(frozen=True)
class SummaryFacts:
    """What a compaction's summary says, from the trajectory's ledger."""

    notes: tuple[AttemptNote, ...]
    best_source: str | None = None
    best_line: str | None = None
    latest_source: str | None = None
    latest_sha256: str | None = None


def _turn_groups(messages: Sequence[Mapping[str, JsonValue]]) -> list[list[Message]]:
    """Messages grouped by assistant turn: the turn, its tool results, and a nudge after them."""
    groups: list[list[Message]] = []
    for message in messages:
        if message.get("role") == "assistant":
            groups.append([dict(message)])
        elif groups:
            groups[-1].append(dict(message))
    return groups


def _summary_text(facts: SummaryFacts, *, with_sources: bool) -> str:
    lines = ["## Summary of this session so far (older turns were replaced by this summary to fit the "
             "context window)"]
    if facts.notes:
        lines.append("Attempts, in order (tool, source hash, verdict, what changed):")
        lines.extend(note.line(i + 1) for i, note in enumerate(facts.notes))
    else:
        lines.append("No code was evaluated yet.")
    if facts.best_line:
        lines.append(f"Best verified candidate so far: {facts.best_line}")
    if with_sources and facts.best_source:
        lines.append("Its source:\n```python\n" + facts.best_source.rstrip() + "\n```")
    if with_sources and facts.latest_source and facts.latest_source != facts.best_source:
        sha = (facts.latest_sha256 or "")[:8]
        lines.append(f"The latest source ({sha}):\n```python\n" + facts.latest_source.rstrip() + "\n```")
    return "\n".join(lines)


class History:
    """The messages of one trajectory, within ``window`` tokens less ``reserve`` for the reply.

    Args:
        window: the model's context window (tokens).
        reserve: tokens kept for the reply (the profile's output limit).
        tools: the tool schemas sent with every request (they count too).
    """

    def __init__(self, *, window: int, reserve: int, tools: Sequence[Mapping[str, JsonValue]] = ()) -> None:
        self.window = window
        self.reserve = reserve
        self.tools = list(tools)
        self.messages: list[Message] = []
        #: Real tokens per estimated token (see `observe`).
        self.factor = INITIAL_TOKEN_FACTOR
        self.compactions = 0
        self._learned: float | None = None
        self._floor = 0.0
        self._head_problem: str | None = None

    # -- size --------------------------------------------------------------------------------
    @property
    def room(self) -> int:
        """Tokens the messages may take."""
        return max(0, self.window - self.reserve - FRAMING_TOKENS)

    def raw_estimate(self, messages: Sequence[Mapping[str, JsonValue]] | None = None) -> int:
        return estimate_tokens(self.messages if messages is None else messages, self.tools)

    def tokens(self, messages: Sequence[Mapping[str, JsonValue]] | None = None) -> int:
        """The calibrated estimate of what the messages (and tools) take."""
        return int(self.raw_estimate(messages) * self.factor) + 1

    def observe(self, prompt_tokens: int, raw_estimate: int) -> None:
        """Learn the server's tokens per estimated token from a reply's reported usage.

        The largest ratio seen wins (a server that silently truncated a prompt reports fewer
        tokens than it was sent; that must not shrink the estimate).
        """
        if prompt_tokens > 0 and raw_estimate > 0:
            ratio = prompt_tokens / raw_estimate * CALIBRATION_MARGIN
            self._learned = ratio if self._learned is None else max(self._learned, ratio)
            self.factor = max(self._learned, self._floor)

    def overflowed(self, error_text: str) -> None:
        """A server said the request did not fit: believe its counts when it states them (the
        prompt's tokens calibrate the estimate, its window replaces the profile's); otherwise the
        room for the messages is taken to be ``OVERFLOW_SHRINK`` of what they took in the request
        that was refused."""
        counts = parse_overflow_tokens(error_text)
        raw = self.raw_estimate()
        if counts and raw:
            prompt, window = counts
            self._floor = max(self._floor, prompt / raw * CALIBRATION_MARGIN)
            self.factor = max(self.factor, self._floor)
            self.window = min(self.window, window)
        else:
            self.window = min(self.window, int(OVERFLOW_SHRINK * self.tokens()) + self.reserve + FRAMING_TOKENS)

    def fits(self) -> bool:
        return self.tokens() <= HIGH_WATER * self.room

    # -- changes -----------------------------------------------------------------------------
    def append(self, message: Mapping[str, JsonValue]) -> None:
        self.messages.append(dict(message))

    def compact(self, facts: SummaryFacts, *, target: float = LOW_WATER) -> str:
        """Replace the older turns by a summary; the turns kept take at most ``target`` of the
        space the head (system message, problem and summary) leaves.

        Returns:
            The summary's text (the caller records it).

        Raises:
            HistoryTooLong: not even the system message, the problem and the summary fit.
        """
        if len(self.messages) < 2:
            raise HistoryTooLong("the history has no problem message to summarise onto")
        system, problem = self.messages[0], self.messages[1]
        if self._head_problem is None:
            self._head_problem = text_field(problem, "content") or ""
        groups = _turn_groups(self.messages[2:])
        shas = [n.source_sha256 for n in facts.notes]
        ceiling = HIGH_WATER * self.room
        # The latest turn (with its tool results: the newest feedback) is kept whenever anything is;
        # the sources in the summary go before it does.
        least = 1 if groups else 0
        for fewest, with_sources in ((least, True), (least, False), (0, False)):
            summary = _summary_text(facts, with_sources=with_sources)
            head: list[Message] = [dict(system), {"role": "user", "content": f"{self._head_problem}\n\n{summary}"}]
            fixed = self.tokens(head)
            limit = fixed + target * (ceiling - fixed)
            for keep in range(min(KEEP_TURNS, len(groups)), fewest - 1, -1):
                kept = groups[len(groups) - keep:] if keep else []
                candidate = head + _with_references(kept, shas, facts.latest_sha256)
                if self.tokens(candidate) <= limit:
                    self.messages = candidate
                    self.compactions += 1
                    return summary
        raise HistoryTooLong(f"the system prompt, the problem and the attempt log take about "
                             f"{self.tokens(head)} tokens; the window leaves {self.room} for them")


def _with_references(groups: list[list[Message]], shas: Sequence[str], keep_sha: str | None) -> list[Message]:
    """The kept turns, each older source in a call's arguments replaced by a reference to its attempt."""
    out: list[Message] = []
    last = len(groups) - 1
    for position, group in enumerate(groups):
        for message in group:
            calls = message_calls(message)
            if position == last or not calls:
                out.append(message)
                continue
            new_calls: list[JsonValue] = []
            for call in calls:
                function = dict(call_function(call))
                try:
                    arguments = json.loads(text_field(function, "arguments") or "{}")
                except ValueError:
                    arguments = None
                source = arguments.get("source") if isinstance(arguments, dict) else None
                if isinstance(source, str):
                    sha = hashlib.sha256(source.encode()).hexdigest()
                    if sha != keep_sha:
                        n = (len(shas) - shas[::-1].index(sha)) if sha in shas else "?"
                        function["arguments"] = json.dumps({**arguments,
                                                            "source": _REFERENCE.format(sha=sha[:8], n=n)})
                new_calls.append({**call, "function": function})
            out.append({**message, "tool_calls": new_calls})
    return out
