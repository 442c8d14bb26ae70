"""The tools the model calls, as OpenAI function schemas, and their execution through an Evaluator.

Every code-running call is an *attempt*: evaluated to the tool's depth, recorded with its verdict
and its parent (the source this one was derived from in the same trajectory). An identical source
is not evaluated twice in a job: a stored verdict that answers the call (same tool, a deeper one,
or a failure before the requested stage) is served again instead. Verdicts of kind ``infra`` are
retried, recorded, never shown to the model and never charged to its budget.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from agent.feedback import AttemptNote, change_summary, dumps_specs, gpu_summary, tool_error, verdict_feedback
from agent.job import CandidateRecord
from agent.protocols import Evaluator, Recorder
from agent.providers.base import ToolCall
from agent.retry import INFRA_RETRY, InfraRetry
from problems.spec import MAX_SOURCE_BYTES
from vocabulary.devices import DeviceSpecs
from vocabulary.evaluation import Depth
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict, source_sha256
from vocabulary.wire import JsonObject

__all__ = [
    "DEPTH_OF",
    "TOOL_SCHEMAS",
    "Ledger",
    "ToolExecutor",
    "ToolName",
    "ToolResult",
    "source_sha256",
    "tool_schemas",
]

log = logging.getLogger(__name__)


class ToolName(StrEnum):
    GET_GPU_SPECS = "get_gpu_specs"
    COMPILE = "compile"
    CHECK_CORRECTNESS = "check_correctness"
    BENCHMARK = "benchmark"
    PROFILE = "profile"
    SUBMIT = "submit"


#: The evaluation depth each code-running tool asks for.
DEPTH_OF = {
    ToolName.COMPILE: Depth.COMPILE,
    ToolName.CHECK_CORRECTNESS: Depth.CORRECTNESS,
    ToolName.BENCHMARK: Depth.BENCHMARK,
    ToolName.PROFILE: Depth.PROFILE,
    ToolName.SUBMIT: Depth.BENCHMARK,
}
#: Stored verdicts of these tools answer a call of the key tool for the same source.
_ANSWERED_BY = {
    ToolName.COMPILE: (ToolName.COMPILE, ToolName.CHECK_CORRECTNESS, ToolName.BENCHMARK, ToolName.SUBMIT,
                       ToolName.PROFILE),
    ToolName.CHECK_CORRECTNESS: (ToolName.CHECK_CORRECTNESS, ToolName.BENCHMARK, ToolName.SUBMIT,
                                 ToolName.PROFILE),
    ToolName.BENCHMARK: (ToolName.BENCHMARK, ToolName.SUBMIT),
    ToolName.SUBMIT: (ToolName.SUBMIT, ToolName.BENCHMARK),
    ToolName.PROFILE: (ToolName.PROFILE,),
}
#: A candidate's failure at one of these stages answers any deeper call for the same source.
_EARLY_STAGES = frozenset({"compile", "load", "correctness", "integrity"})

_SOURCE = {
    "type": "string",
    "description": "The complete Python file defining class ModelNew (the whole file every time, not a diff).",
}


def _schema(name: ToolName, description: str, *, source: bool) -> JsonObject:
    """A tool's function-calling schema (JSON sent to the LLM with every request)."""
    parameters: JsonObject = {"type": "object", "properties": {}, "additionalProperties": False}
    if source:
        parameters = {"type": "object", "properties": {"source": _SOURCE}, "required": ["source"],
                      "additionalProperties": False}
    return {"type": "function", "function": {"name": name.value, "description": description,
                                             "parameters": parameters}}


TOOL_SCHEMAS: tuple[JsonObject, ...] = (
    _schema(ToolName.GET_GPU_SPECS, "Specs of the device the candidate is judged on: name, SMs, caches, "
            "peak FLOP rates, measured memory bandwidth.", source=False),
    _schema(ToolName.COMPILE, "Build the file's extensions (no GPU visible; identical extension sources reuse "
            "an earlier build). Returns compiler errors with file:line, or registers and spills per kernel.",
            source=True),
    _schema(ToolName.CHECK_CORRECTNESS, "Build, then run every correctness trial against the reference "
            "(random inputs, another value distribution, extra shapes) and the integrity checks. Returns "
            "pass/fail per trial with max/mean abs error and mismatch fraction.", source=True),
    _schema(ToolName.BENCHMARK, "Correctness, then timing: median time, speedup vs eager PyTorch and vs "
            "torch.compile, and % of the roofline's speed-of-light.", source=True),
    _schema(ToolName.PROFILE, "Correctness, then a per-kernel time table from the torch profiler (where the "
            "time goes).", source=True),
    _schema(ToolName.SUBMIT, "Final answer: full verification (correctness + timing) of this file, then the "
            "session ends. Submit your fastest correct candidate.", source=True),
)


def tool_schemas() -> list[JsonObject]:
    """Fresh copies of the schemas (providers may serialise or alter what they are given)."""
    import copy

    return [copy.deepcopy(s) for s in TOOL_SCHEMAS]


#: Verdicts that judged nothing (ours, or cut short by the job's stop): never served again.
_NOT_JUDGED = frozenset({ErrorKind.INFRA, ErrorKind.CANCELLED})


def _rejected(text: str) -> ToolResult:
    return ToolResult(tool_error(text) + " (not run, not charged)", charged=False)


def _answers(stored_tool: ToolName, verdict: Verdict, wanted: ToolName) -> bool:
    if verdict.error_kind in _NOT_JUDGED:
        return False
    if stored_tool in _ANSWERED_BY[wanted]:
        return True
    return verdict.status in (Status.FAIL, Status.ERROR) and verdict.stage in _EARLY_STAGES


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call, for the loop."""

    #: The tool message the model reads.
    text: str
    #: Whether it counts against the tool-call budget (malformed or unknown calls and infra
    #: failures do not).
    charged: bool = True
    ends_trajectory: bool = False
    verdict: Verdict | None = None
    source: str | None = None
    infra_failure: bool = False


@dataclass
class Ledger:
    """One trajectory's memory of its attempts: parents, sources, the attempt log, its best."""

    parent_of: dict[str, str | None] = field(default_factory=dict)
    last_sha: str | None = None
    notes: list[AttemptNote] = field(default_factory=list)
    best: CandidateRecord | None = None
    quarantined: list[CandidateRecord] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    #: The source of the latest attempt.
    latest_source: str | None = None
    #: Seconds this trajectory's evaluations spent compiling, and how many compiled anything.
    compile_s: float = 0.0
    compiles: int = 0

    def charge_compile(self, verdict: Verdict) -> None:
        """Add a fresh evaluation's compile seconds (a stored verdict served again costs none)."""
        seconds = verdict.compile.seconds if verdict.compile is not None else 0.0
        if seconds > 0:
            self.compile_s += seconds
            self.compiles += 1

    def parent_for(self, sha: str) -> str | None:
        """The source this one was derived from: the previous distinct source when first seen; a
        source seen before is a re-run of itself (its parent is its own earlier attempt, never the
        one its first run was edited from)."""
        seen = sha in self.parent_of
        if not seen:
            self.parent_of[sha] = self.last_sha if self.last_sha != sha else None
        self.last_sha = sha
        return sha if seen else self.parent_of[sha]

    @property
    def best_ms(self) -> float | None:
        return self.best.median_ms if self.best else None

    def observe(self, tool: str, verdict: Verdict, source: str, trajectory_index: int) -> None:
        sha = source_sha256(source)
        parent = self.parent_of.get(sha)
        self.sources[sha] = source
        self.latest_source = source
        changed = change_summary(source, self.sources.get(parent) if parent else None, parent)
        self.notes.append(AttemptNote.from_verdict(tool, verdict, source_sha256=sha, changed=changed))
        record = CandidateRecord(source=source, source_sha256=sha, tool=tool, trajectory_index=trajectory_index,
                                 parent_sha256=parent, verdict=verdict)
        if verdict.is_verified:
            median = record.median_ms
            if median is not None and (self.best_ms is None or median < self.best_ms):
                self.best = record
        elif verdict.status is Status.SUSPICIOUS and all(q.source_sha256 != sha for q in self.quarantined):
            self.quarantined.append(record)


class ToolExecutor:
    """Runs tool calls for every trajectory of one job (thread-safe).

    Args:
        evaluator: judges candidates.
        recorder: stores attempts and finds earlier ones (already serialised by the caller).
        retry: the infra-retry policy (`agent.retry.INFRA_RETRY`).
        sleep: how to wait (tests pass a no-op).
        stopping: whether the job is stopping (then an infra failure is not retried: the
            evaluation was most likely cut on purpose).
    """

    def __init__(self, evaluator: Evaluator, recorder: Recorder, *, retry: InfraRetry = INFRA_RETRY,
                 sleep: Callable[[float], None] = time.sleep,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.evaluator = evaluator
        self.stopping = stopping
        self.recorder = recorder
        self.retry = retry
        self._sleep = sleep
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, str], threading.Lock] = {}
        self._specs: DeviceSpecs | None = None
        self.evaluations = 0

    # -- device specs ------------------------------------------------------------------------
    def device_specs(self) -> DeviceSpecs | None:
        """The evaluator's device specs (asked once per job; None if they cannot be had now)."""
        with self._lock:
            if self._specs is not None:
                return self._specs
        for attempt, pause in enumerate(self.retry.pauses()):
            try:
                specs = self.evaluator.device_specs
            except Exception:  # the reference could not start: infra, retried
                log.warning("device_specs failed (try %d)", attempt + 1, exc_info=True)
                if pause is not None:
                    self._sleep(pause)
                continue
            with self._lock:
                self._specs = specs
            return specs
        return None

    # -- one call ----------------------------------------------------------------------------
    def execute(self, call: ToolCall, *, trajectory_index: int, ledger: Ledger) -> ToolResult:
        """Validate and run one tool call; malformed calls come back as error text for the model,
        uncharged (a call that ran nothing costs no budget)."""
        if call.error:
            return _rejected(f"{call.name or 'tool call'}: {call.error}")
        try:
            tool = ToolName(call.name)
        except ValueError:
            known = ", ".join(t.value for t in ToolName)
            return _rejected(f"unknown tool {call.name!r}; the tools are: {known}")
        arguments = call.arguments or {}
        if tool is ToolName.GET_GPU_SPECS:
            specs = self.device_specs()
            if specs is None:
                return ToolResult("get_gpu_specs is unavailable right now (a problem on our side, not charged); "
                                  "call it again later.", charged=False, infra_failure=True)
            return ToolResult(gpu_summary(specs) + "\n" + dumps_specs(specs))
        source = arguments.get("source")
        unexpected = sorted(set(arguments) - {"source"})
        if not isinstance(source, str) or not source.strip():
            return _rejected(f"{tool.value} needs `source`: the complete Python file as a string")
        if unexpected:
            return _rejected(f"{tool.value} takes only `source`; unexpected: {', '.join(unexpected)}")
        if len(source.encode()) > MAX_SOURCE_BYTES:
            return _rejected(f"the source is {len(source.encode())} bytes; the limit is {MAX_SOURCE_BYTES}")
        return self._run_code_tool(tool, source, trajectory_index=trajectory_index, ledger=ledger)

    def _stored(self, tool: ToolName, sha: str) -> tuple[ToolName, Verdict] | None:
        order = [tool, *(t for t in ToolName if t is not tool and t is not ToolName.GET_GPU_SPECS)]
        for stored_tool in order:
            verdict = self.recorder.find_attempt(source_sha256=sha, tool=stored_tool.value)
            if verdict is not None and _answers(stored_tool, verdict, tool):
                return stored_tool, verdict
        return None

    def _key_lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._lock:
            return self._inflight.setdefault(key, threading.Lock())

    def _run_code_tool(self, tool: ToolName, source: str, *, trajectory_index: int, ledger: Ledger) -> ToolResult:
        sha = source_sha256(source)
        parent = ledger.parent_for(sha)
        best_before = ledger.best_ms
        # One evaluation per (source, depth) at a time across trajectories; the second caller
        # finds the first one's stored verdict.
        with self._key_lock((sha, DEPTH_OF[tool])):
            stored = self._stored(tool, sha)
            if stored is not None:
                stored_tool, verdict = stored
                ledger.observe(tool.value, verdict, source, trajectory_index)
                text = verdict_feedback(tool.value, verdict, reused_from=stored_tool.value, best_ms=best_before,
                                        compile_s_total=ledger.compile_s, compiles=ledger.compiles)
                return ToolResult(text, ends_trajectory=tool is ToolName.SUBMIT, verdict=verdict, source=source)
            verdict = self._evaluate_with_retries(tool, source, trajectory_index=trajectory_index, parent=parent)
        if verdict.error_kind is ErrorKind.CANCELLED:  # the job is stopping: nothing was judged
            return ToolResult(f"{tool.value} was stopped: the job is ending (not your code).", charged=False)
        if verdict.error_kind is ErrorKind.INFRA:
            return ToolResult(f"{tool.value} could not run because of a problem on our side (not your code); it "
                              "was not charged to your budget. Call it again.", charged=False, infra_failure=True)
        if verdict.error_kind is ErrorKind.PROBLEM:
            # The user's reference failed: no candidate can be judged, and the job stops.
            return ToolResult(f"{tool.value} could not judge your code: the problem's own reference code failed "
                              f"({verdict.message[:500]}). This is not your code's fault; the job stops.",
                              charged=False, verdict=verdict, source=source)
        ledger.observe(tool.value, verdict, source, trajectory_index)
        ledger.charge_compile(verdict)
        text = verdict_feedback(tool.value, verdict, best_ms=best_before, compile_s_total=ledger.compile_s,
                                compiles=ledger.compiles)
        return ToolResult(text, ends_trajectory=tool is ToolName.SUBMIT, verdict=verdict, source=source)

    def _evaluate_with_retries(self, tool: ToolName, source: str, *, trajectory_index: int,
                               parent: str | None) -> Verdict:
        depth = DEPTH_OF[tool]
        verdict: Verdict | None = None
        for pause in self.retry.pauses():
            try:
                verdict = self.evaluator.evaluate(source, depth)
            except Exception as exc:  # an evaluator that raises is our failure, not the model's
                log.warning("evaluate(%s) raised", depth, exc_info=True)
                verdict = Verdict(status=Status.ERROR, stage=Stage.PROBLEM, error_kind=ErrorKind.INFRA,
                                  message=f"the evaluator raised {type(exc).__name__}: {exc}", depth=depth)
            with self._lock:
                self.evaluations += 1
            self.recorder.attempt(trajectory_index=trajectory_index, tool=tool.value, source=source,
                                  parent_sha256=parent, verdict=verdict)
            if not self.retry.retryable(verdict) or self.stopping():
                return verdict
            if pause is not None:
                self._sleep(pause)
        assert verdict is not None  # the loop ran at least once
        return verdict
