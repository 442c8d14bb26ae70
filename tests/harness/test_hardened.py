"""Hardened timing's arithmetic: the dictated call count and the trusted clock's bound (pure)."""

from harness.hardened import calls_made, dictated_calls, hardened_bound
from harness.options import TimingOptions
from harness.verdict import Timing

_REQUEST = TimingOptions(min_warmup_calls=3, fixed_calls=10)


def _timing(ms: float, n: int = 10) -> Timing:
    return Timing(samples_ms=(ms,) * n)


def test_dictated_calls_fill_the_time_budget_at_eager_speed_within_the_repeat_limits() -> None:
    timing = TimingOptions(min_repeats=20, max_repeats=200, max_time_s=1.0)
    assert dictated_calls(10.0, timing) == 100  # 1 s of 10 ms calls
    assert dictated_calls(1000.0, timing) == 20  # slow eager: at least min_repeats
    assert dictated_calls(0.001, timing) == 200  # fast eager: at most max_repeats
    assert dictated_calls(0.0, timing) == 20  # no eager figure: min_repeats


def test_calls_made_count_warm_up_timed_and_one_recheck_per_set() -> None:
    assert calls_made(_REQUEST, [0, 1]) == 3 + 10 + 2


def test_an_honest_median_is_explained_by_the_wall_clock() -> None:
    calls = calls_made(_REQUEST, [0])
    wall_s = calls * 5e-3 + 0.2  # 5 ms per call plus the loop's overhead
    suspicious, detail = hardened_bound(_timing(5.0), wall_s, 0.2, _REQUEST, [0])
    assert not suspicious and "14 calls" in detail


def test_a_median_far_below_the_wall_clock_disagrees() -> None:
    request = TimingOptions(min_warmup_calls=3, fixed_calls=100)
    wall_s = calls_made(request, [0]) * 5e-3 + 0.01  # the calls really took 5 ms each
    honest, _ = hardened_bound(_timing(5.0, n=100), wall_s, 0.01, request, [0])
    patched, _ = hardened_bound(_timing(0.1, n=100), wall_s, 0.01, request, [0])  # a clock 50x too fast
    assert not honest and patched


def test_a_sample_count_other_than_dictated_disagrees_outright() -> None:
    suspicious, detail = hardened_bound(_timing(5.0, n=9), 10.0, 0.0, _REQUEST, [0])
    assert suspicious and "9 samples reported, 10 dictated" in detail
