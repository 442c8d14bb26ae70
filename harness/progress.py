"""What an evaluation is doing now: stage events for a live view (stdlib only).

A `Referee` built with ``on_stage`` tells it when each stage starts and finishes: the torch
header build (once per cache), the reference's start, the baselines' timing, and per evaluation
the candidate's compile, load, correctness trials (with the integrity checks) and timing (or
profile). One ``started`` and one ``finished`` per stage that runs, nothing for a stage served
from a cache, so a job's event stream stays small. Events are advisory: a listener that raises
is ignored, it never changes a verdict.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from vocabulary.stages import StageEvent, StageName, StagePhase

__all__ = ["StageListener", "StageReporter"]


StageListener = Callable[[StageEvent], None]


class StageReporter:
    """Tells a listener (or nobody) of stages: `span` around a block, or `enter` for stages that
    follow each other (entering one finishes the one before; `close` finishes the last)."""

    def __init__(self, listener: StageListener | None) -> None:
        self._listener = listener
        self._open: tuple[StageName, float] | None = None

    def emit(self, event: StageEvent) -> None:
        if self._listener is None:
            return
        with contextlib.suppress(Exception):  # a live view must never change a verdict
            self._listener(event)

    @contextlib.contextmanager
    def span(self, stage: StageName) -> Iterator[None]:
        self.emit(StageEvent(stage, StagePhase.STARTED))
        started = time.perf_counter()
        try:
            yield
        finally:
            self.emit(StageEvent(stage, StagePhase.FINISHED, time.perf_counter() - started))

    def enter(self, stage: StageName) -> None:
        self.close()
        self.emit(StageEvent(stage, StagePhase.STARTED))
        self._open = (stage, time.perf_counter())

    def close(self) -> None:
        if self._open is not None:
            stage, started = self._open
            self._open = None
            self.emit(StageEvent(stage, StagePhase.FINISHED, time.perf_counter() - started))
