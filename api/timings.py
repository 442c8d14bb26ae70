"""A job's time to verdict as the API answers it (``GET /jobs/{id}/timings``) and the dashboard's
job page shows it: the store's per-attempt seconds (`store.timings`) summed up by
`display.timings` (p50 and p95 per stage, lane seconds per attempt kind, verdicts per lane-hour).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field

from display.timings import AttemptSeconds, KindSummary, StagePercentiles, TimeToVerdict, time_to_verdict
from store import JobTimings
from vocabulary.verdict import AttemptKind

__all__ = ["AttemptTimingPublic", "JobTimingsPublic", "job_time_to_verdict"]


def job_time_to_verdict(timings: JobTimings) -> TimeToVerdict:
    """The table over the job's attempts, its queue wait as the first row."""
    return time_to_verdict(
        (AttemptSeconds(kind=a.kind.value, stages=dict(a.stage_seconds.items()), lane_s=a.lane_s)
         for a in timings.attempts),
        queue_waits=() if timings.queue_wait_s is None else (timings.queue_wait_s,),
    )


class StagePublic(BaseModel):
    stage: str = Field(description="`queue_wait` (created → claimed), or a referee stage: `header_build`, "
                       "`reference_start`, `baselines`, `compile`, `load`, `correctness`, `timing`.")
    n: int = Field(description="Attempts the stage ran for (a cached compile runs none).")
    p50_s: float
    p95_s: float
    total_s: float

    @classmethod
    def of(cls, row: StagePercentiles) -> StagePublic:
        return cls(stage=row.stage, n=row.n, p50_s=row.p50_s, p95_s=row.p95_s, total_s=row.total_s)


class KindPublic(BaseModel):
    kind: str = Field(description="An attempt kind (`compile_error`, `wrong`, `correct`, `fast`, `error`), or "
                      "`all`.")
    attempts: int
    lane_s: float = Field(description="Their seconds on the device lane, together.")
    p50_lane_s: float
    p95_lane_s: float

    @classmethod
    def of(cls, row: KindSummary) -> KindPublic:
        return cls(kind=row.kind, attempts=row.attempts, lane_s=row.lane_s, p50_lane_s=row.p50_lane_s,
                   p95_lane_s=row.p95_lane_s)


class AttemptTimingPublic(BaseModel):
    n: int
    tool: str
    kind: AttemptKind = Field(description="`compile_error`: did not build; `wrong`: failed correctness or "
                              "integrity (or crashed); `correct`: passed, not shown faster than eager; `fast`: a "
                              "verified kernel faster than eager; `error`: infrastructure, the problem's code, or "
                              "a time limit.")
    stage_seconds: Mapping[str, float] = Field(description="Seconds per stage that ran (the verdict's "
                                               "`stage_seconds`).")
    lane_s: float = Field(description="Seconds on the device lane: reference start, baselines, load, correctness, "
                          "timing (compiles run beside it).")


class JobTimingsPublic(BaseModel):
    job_id: int
    queue_wait_s: float | None = Field(description="Created → claimed by a worker (the latest claim); null while "
                                       "queued.")
    attempts: list[AttemptTimingPublic]
    stages: list[StagePublic] = Field(description="p50 and p95 of each stage over the attempts it ran for; the "
                                      "queue wait first.")
    kinds: list[KindPublic] = Field(description="Lane seconds per attempt kind, then `all`.")
    lane_s: float
    verdicts_per_lane_hour: float | None = Field(description="Attempts per hour of lane time (per GPU-hour on "
                                                 "cuda); null before any attempt used the lane.")

    @classmethod
    def of(cls, timings: JobTimings) -> JobTimingsPublic:
        table = job_time_to_verdict(timings)
        return cls(
            job_id=timings.job_id, queue_wait_s=timings.queue_wait_s,
            attempts=[AttemptTimingPublic(n=a.n, tool=a.tool, kind=a.kind, stage_seconds=dict(a.stage_seconds.items()),
                                          lane_s=a.lane_s) for a in timings.attempts],
            stages=[StagePublic.of(r) for r in table.stages], kinds=[KindPublic.of(k) for k in table.kinds],
            lane_s=table.lane_s, verdicts_per_lane_hour=table.verdicts_per_lane_hour,
        )
