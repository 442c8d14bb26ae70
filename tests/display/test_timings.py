"""`display.timings`: the time-to-verdict table the dashboard, the bench reports and the iteration
benchmark share."""

from __future__ import annotations

import pytest

from display.timings import AttemptSeconds, percentile, time_to_verdict


def test_percentiles_are_linear_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0, 5.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == pytest.approx(4.8)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 5.0
    assert percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


def _attempt(kind: str, **stages: float) -> AttemptSeconds:
    lane = sum(v for k, v in stages.items() if k in ("reference_start", "baselines", "load", "correctness", "timing"))
    return AttemptSeconds(kind=kind, stages=stages, lane_s=lane)


def test_each_stage_counts_the_attempts_it_ran_for_and_the_lane_gives_verdicts_per_hour() -> None:
    attempts = [
        _attempt("compile_error", compile=20.0),
        _attempt("wrong", reference_start=2.0, baselines=4.0, compile=30.0, load=0.5, correctness=1.5),
        _attempt("fast", compile=10.0, load=0.5, correctness=1.5, timing=1.0),
        _attempt("correct", load=0.5, correctness=1.5, timing=2.0),  # its build was cached: no compile stage
    ]
    table = time_to_verdict(attempts, queue_waits=[3.0])
    rows = {r.stage: r for r in table.stages}
    assert [r.stage for r in table.stages] == ["queue_wait", "reference_start", "baselines", "compile", "load",
                                               "correctness", "timing"]
    assert (rows["queue_wait"].n, rows["queue_wait"].p50_s) == (1, 3.0)
    assert (rows["compile"].n, rows["compile"].p50_s, rows["compile"].total_s) == (3, 20.0, 60.0)
    assert rows["compile"].p95_s == pytest.approx(29.0)
    assert (rows["timing"].n, rows["timing"].p50_s) == (2, 1.5)
    # Lane: 8.0 + 3.0 + 4.0 seconds for four verdicts: 960 an hour.
    assert table.lane_s == pytest.approx(15.0)
    assert table.verdicts_per_lane_hour == pytest.approx(4 * 3600 / 15.0)
    kinds = {k.kind: k for k in table.kinds}
    assert [k.kind for k in table.kinds] == ["compile_error", "wrong", "correct", "fast", "all"]
    assert (kinds["compile_error"].attempts, kinds["compile_error"].lane_s) == (1, 0.0)
    assert (kinds["wrong"].lane_s, kinds["all"].attempts, kinds["all"].p50_lane_s) == (8.0, 4, 3.5)
    by_kind = dict(table.stages_by_kind)
    assert [r.stage for r in by_kind["fast"]] == ["compile", "load", "correctness", "timing"]
    data = table.to_dict()
    assert data["verdicts_per_lane_hour"] == 960.0 and data["stages"][0]["stage"] == "queue_wait"  # type: ignore[index]
    text = table.markdown(by_kind=True)
    assert "**960 verdicts per lane-hour**" in text
    assert "| queue wait | 1 | 3.00 | 3.00 | 3.00 |" in text
    assert "| compile error | 1 | 0.00 | 0.00 | 0.00 |" in text
    assert "| fast | timing | 1 | 1.00 | 1.00 | 1.00 |" in text


def test_no_attempts_no_lane_time() -> None:
    table = time_to_verdict([])
    assert (table.attempts, table.stages, table.kinds, table.verdicts_per_lane_hour) == (0, (), (), None)
    assert "— verdicts per lane-hour" in table.markdown()
    only_compiles = time_to_verdict([_attempt("compile_error", compile=5.0)])
    assert only_compiles.verdicts_per_lane_hour is None
