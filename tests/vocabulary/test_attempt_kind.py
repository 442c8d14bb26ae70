"""`vocabulary.verdict.attempt_kind`, the one classification of a verdict (metrics, reports, dashboard),
and `StageSeconds`' lane seconds and sums."""

from __future__ import annotations

from dataclasses import fields

import pytest

from display.timings import KIND_ORDER, STAGE_ORDER
from vocabulary.builds import CompileResult
from vocabulary.stages import LANE_STAGES, StageSeconds
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import AttemptKind, ErrorKind, Stage, Status, Trial, Verdict, attempt_kind


def _timing(ms: float) -> Timing:
    return Timing.from_samples([ms] * 5, clock="cuda_events")


def _verdict(status: Status, stage: Stage, *, error_kind: ErrorKind | None = None, message: str = "",
             median_ms: float | None = None, depth: str = "benchmark") -> Verdict:
    return Verdict(status=status, stage=stage, error_kind=error_kind, message=message,
                   compile=CompileResult(ok=stage is not Stage.COMPILE or status is Status.PASS, seconds=3.0),
                   trials=(Trial(seed_index=0, passed=status is not Status.FAIL, max_abs_err=0.0, mean_abs_err=0.0,
                                 mismatch_frac=0.0),),
                   timing=_timing(median_ms) if median_ms is not None else None,
                   baselines=Baselines(eager=_timing(4.0), torch_compile=_timing(2.0)), depth=depth)


@pytest.mark.parametrize(("verdict", "kind"), [
    (_verdict(Status.ERROR, Stage.COMPILE, error_kind=ErrorKind.CANDIDATE, message="compile failed"),
     AttemptKind.COMPILE_ERROR),
    (_verdict(Status.ERROR, Stage.COMPILE, error_kind=ErrorKind.CANDIDATE, message="compile timed out"),
     AttemptKind.COMPILE_ERROR),
    (_verdict(Status.FAIL, Stage.CORRECTNESS, message="2 of 5 trials failed"), AttemptKind.WRONG),
    (_verdict(Status.FAIL, Stage.INTEGRITY, message="the extension does no work"), AttemptKind.WRONG),
    (_verdict(Status.ERROR, Stage.LOAD, error_kind=ErrorKind.CANDIDATE,
              message="loading the candidate: the candidate process was killed by SIGSEGV"), AttemptKind.WRONG),
    (_verdict(Status.ERROR, Stage.TIMING, error_kind=ErrorKind.CANDIDATE, message="RuntimeError: x (while timed)"),
     AttemptKind.WRONG),
    # Slower than eager (4 ms), as fast as eager, untimed, quarantined: correct, not fast.
    (_verdict(Status.PASS, Stage.DONE, median_ms=5.0), AttemptKind.CORRECT),
    (_verdict(Status.PASS, Stage.DONE, median_ms=4.0), AttemptKind.CORRECT),
    (_verdict(Status.PASS, Stage.CORRECTNESS, depth="correctness"), AttemptKind.CORRECT),
    (_verdict(Status.PASS, Stage.COMPILE, depth="compile"), AttemptKind.CORRECT),
    (_verdict(Status.SUSPICIOUS, Stage.DONE, median_ms=0.01), AttemptKind.CORRECT),
    (_verdict(Status.PASS, Stage.DONE, median_ms=2.0), AttemptKind.FAST),
    # A profile pass is timed but not a verified benchmark.
    (_verdict(Status.PASS, Stage.DONE, median_ms=2.0, depth="profile"), AttemptKind.CORRECT),
    (_verdict(Status.ERROR, Stage.CORRECTNESS, error_kind=ErrorKind.INFRA, message="cancelled"), AttemptKind.ERROR),
    (_verdict(Status.ERROR, Stage.PROBLEM, error_kind=ErrorKind.PROBLEM, message="the reference raised"),
     AttemptKind.ERROR),
    (_verdict(Status.ERROR, Stage.CORRECTNESS, error_kind=ErrorKind.CANDIDATE,
              message="the correctness trials timed out"), AttemptKind.ERROR),
], ids=lambda v: v.value if isinstance(v, AttemptKind) else None)
def test_every_verdict_has_one_kind(verdict: Verdict, kind: AttemptKind) -> None:
    assert attempt_kind(verdict) is kind
    assert attempt_kind(Verdict.from_dict(verdict.to_dict())) is kind  # as read back from the store


def test_the_lane_is_the_device_stages_and_sums_add_stage_by_stage() -> None:
    seconds = StageSeconds(header_build=20.0, reference_start=1.5, baselines=3.0, compile=30.0, load=0.4,
                           correctness=1.6, timing=1.5)
    assert seconds.lane == pytest.approx(1.5 + 3.0 + 0.4 + 1.6 + 1.5)
    assert StageSeconds().lane == 0.0
    compiled = StageSeconds(header_build=2.0, compile=12.5)
    timed = StageSeconds(compile=0.1, load=0.3, correctness=1.0, timing=1.25)
    both = compiled.plus(timed)
    assert both == StageSeconds(header_build=2.0, compile=12.6, load=0.3, correctness=1.0, timing=1.25)
    assert both.lane == timed.lane  # the compile is beside the lane
    assert set(LANE_STAGES) <= {f.name for f in fields(StageSeconds)}


def test_the_tables_order_is_the_verdicts() -> None:
    assert ("queue_wait", *(f.name for f in fields(StageSeconds))) == STAGE_ORDER
    assert tuple(k.value for k in AttemptKind) == KIND_ORDER
