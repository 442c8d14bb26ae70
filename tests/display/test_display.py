"""The number formats and problem labels the dashboard and the CLI share (`display`)."""

from __future__ import annotations

import math

import pytest

from display import MISSING, finite, fmt_ms, fmt_pct, fmt_speedup, fmt_usd, problem_label


@pytest.mark.parametrize("value", [None, "1.5", True, math.nan, math.inf, -math.inf, [1.0]])
def test_what_is_not_a_finite_number_shows_as_missing(value: object) -> None:
    assert finite(value) is None
    assert fmt_ms(value) == fmt_speedup(value) == fmt_pct(value) == fmt_usd(value) == MISSING


def test_figures_read_as_the_dashboard_script_writes_them() -> None:
    # static/dashboard.js: fmtMs, fmtX, fmtPct, fmtUsd.
    assert (fmt_ms(12.3456), fmt_ms(1), fmt_ms(0.012345)) == ("12.346", "1.000", "0.0123")
    assert (fmt_speedup(1.234), fmt_speedup(3)) == ("1.23×", "3.00×")
    assert fmt_pct(41.26) == "41.3%"
    assert (fmt_usd(0), fmt_usd(0.0042), fmt_usd(0.01), fmt_usd(12.345)) == ("$0.00", "$0.0042", "$0.01", "$12.35")


def test_a_problem_is_its_bundled_id_or_the_posted_source_hash() -> None:
    assert problem_label("level1/softmax", "ab" * 32) == "level1/softmax"
    assert problem_label(None, "0123456789abcdef") == "posted 0123456789"
