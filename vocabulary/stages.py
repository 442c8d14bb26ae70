"""The referee's stages as a live view shows them: one ``started`` and one ``finished`` event per
stage that runs (`harness.progress` emits them; the worker stores them as ``stage`` job events).

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum

from vocabulary.wire import JsonObject, Reader

__all__ = ["LANE_STAGES", "StageEvent", "StageName", "StagePhase", "StageSeconds"]


class StageName(StrEnum):
    """The stages a live view shows (the dashboard and the CLI label them)."""

    HEADER_BUILD = "header_build"
    REFERENCE_START = "reference_start"
    BASELINES = "baselines"
    COMPILE = "compile"
    LOAD = "load"
    CORRECTNESS = "correctness"
    TIMING = "timing"


class StagePhase(StrEnum):
    STARTED = "started"
    FINISHED = "finished"


@dataclass(frozen=True)
class StageEvent:
    """One stage starting or finishing; ``seconds`` is its duration once finished (0 when started)."""

    stage: StageName
    phase: StagePhase
    seconds: float = 0.0

    def to_dict(self) -> JsonObject:
        return {"stage": self.stage.value, "phase": self.phase.value, "seconds": round(self.seconds, 3)}

    @classmethod
    def from_dict(cls, data: object) -> StageEvent:
        r = Reader(data, "a stage event")
        return cls(stage=StageName(r.text("stage")), phase=StagePhase(r.text("phase")),
                   seconds=r.number("seconds", 0.0))


#: The stages that occupy the device (on cuda, the GPU) and run one evaluation at a time: the lane
#: whose seconds bound verdicts per GPU-hour. The header build and the compile run beside it (on
#: cuda the worker compiles before it takes the device; on cpu one lock covers the whole
#: evaluation, compile included, so the lane's share is the same stages there).
LANE_STAGES = ("reference_start", "baselines", "load", "correctness", "timing")


@dataclass(frozen=True, kw_only=True)
class StageSeconds:
    """Where an evaluation's time went, by stage (the referee's steps as a live view shows them):
    seconds each took, None where it did not run (a cached compile runs no stage; a job's later
    attempts reuse its reference and baselines)."""

    header_build: float | None = None
    reference_start: float | None = None
    #: The eager and torch.compile baselines, and the timing loop's calibration.
    baselines: float | None = None
    compile: float | None = None
    load: float | None = None
    correctness: float | None = None
    timing: float | None = None

    def items(self) -> list[tuple[str, float]]:
        """``(stage, seconds)`` of the stages that ran, in order."""
        return [(f.name, value) for f in fields(self) if (value := getattr(self, f.name)) is not None]

    @property
    def lane(self) -> float:
        """Seconds this evaluation held the device lane: its `LANE_STAGES` that ran."""
        return sum(value for name, value in self.items() if name in LANE_STAGES)

    def plus(self, other: StageSeconds) -> StageSeconds:
        """Two evaluations' seconds stage by stage (a compile run ahead of its evaluation)."""
        mine, theirs = dict(self.items()), dict(other.items())
        return StageSeconds(**{name: mine.get(name, 0.0) + theirs.get(name, 0.0) for name in {*mine, *theirs}})

    def to_dict(self) -> JsonObject:
        return {name: round(value, 3) for name, value in self.items()}

    @classmethod
    def from_dict(cls, data: object) -> StageSeconds:
        r = Reader(data, "the stage seconds")
        return cls(**{f.name: r.optional_number(f.name) for f in fields(cls)})
