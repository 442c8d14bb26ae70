import json

import pytest

from harness.verdict import Baselines, CompileResult, ErrorKind, Stage, Status, Timing, Trial, Verdict


def test_timing_statistics_are_derived_from_raw_samples() -> None:
    t = Timing.from_samples([1.0, 2.0, 3.0, 4.0, 100.0], clock="perf_counter")
    assert t.n == 5
    assert t.median_ms == 3.0
    assert t.iqr_ms == pytest.approx(52.0 - 1.5)  # exclusive quartiles of 5 samples
    assert Timing.from_dict(t.to_dict()) == t


def test_verdict_json_round_trip_and_derived_figures() -> None:
    verdict = Verdict(
        status=Status.PASS, stage=Stage.DONE,
        compile=CompileResult(ok=True, seconds=1.5, extensions=({"name": "x", "key": "k", "cached": True},)),
        trials=(Trial(0, True, 1e-7, 1e-8, 0.0),),
        timing=Timing.from_samples([2.0, 2.0, 2.0], clock="cuda_events"),
        baselines=Baselines(eager=Timing.from_samples([4.0], clock="cuda_events"),
                            compiled=Timing.from_samples([3.0], clock="cuda_events")),
        sol_ms=0.5,
    )
    data = json.loads(json.dumps(verdict.to_dict()))
    assert data["speedup_vs_eager"] == 2.0
    assert data["speedup_vs_compile"] == 1.5
    assert data["pct_of_sol"] == 25.0
    assert data["compiled"] is True and data["correct"] is True and data["compile_s"] == 1.5
    assert data["timing"]["median_ms"] == 2.0 and data["timing"]["n"] == 3
    assert data["baselines"]["eager_ms"] == 4.0 and data["baselines"]["compile_ms"] == 3.0
    assert Verdict.from_dict(data) == verdict


def test_error_verdict_has_nulls_where_stages_did_not_run() -> None:
    data = Verdict(status=Status.ERROR, stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE).to_dict()
    for key in ("timing", "baselines", "speedup_vs_eager", "speedup_vs_compile", "sol_ms", "pct_of_sol", "compile_s"):
        assert data[key] is None, key
    assert data["correct"] is False and data["compiled"] is False
    assert data["error_kind"] == "candidate"


def test_trial_with_infinite_error_serialises_as_null() -> None:
    data = Trial(1, False, float("inf"), float("nan"), 1.0).to_dict()
    assert data["max_abs_err"] is None and data["mean_abs_err"] is None
    json.dumps(data, allow_nan=False)
