"""The number formats and problem labels the dashboard and the CLI share (`display`)."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from display import MISSING, finite, fmt_ms, fmt_pct, fmt_speedup, fmt_usd, problem_label

DASHBOARD_JS = Path(__file__).resolve().parents[2] / "api" / "dashboard" / "static" / "dashboard.js"


@pytest.mark.parametrize("value", [None, "1.5", True, math.nan, math.inf, -math.inf, [1.0]])
def test_what_is_not_a_finite_number_shows_as_missing(value: object) -> None:
    assert finite(value) is None
    assert fmt_ms(value) == fmt_speedup(value) == fmt_pct(value) == fmt_usd(value) == MISSING


def test_figures_read_as_the_dashboard_script_writes_them() -> None:
    assert (fmt_ms(12.3456), fmt_ms(1), fmt_ms(0.012345)) == ("12.346", "1.000", "0.0123")
    assert (fmt_speedup(1.234), fmt_speedup(3)) == ("1.23×", "3.00×")
    assert fmt_pct(41.26) == "41.3%"
    assert (fmt_usd(0), fmt_usd(0.0042), fmt_usd(0.01), fmt_usd(12.345)) == ("$0.00", "$0.0042", "$0.01", "$12.35")


#: The dashboard script's own formatters, each beside the Python function it mirrors.
_MIRRORED = {"fmtMs": fmt_ms, "fmtX": fmt_speedup, "fmtPct": fmt_pct, "fmtUsd": fmt_usd}
#: Figures as they come: tiny, sub-unit, round, large, at the formats' edges, and not numbers.
_FIGURES = [12.3456, 1, 1.0005, 0.999, 0.5, 0.012345, 0.00012345, 1234.5678, 0, 0.0042, 0.01, 0.00999,
            12.345, 2.675, 41.26, -0.25, -3.5, 1.5e-5, 1e-9, 9.996e-7,
            0.25, 1.125, 0.5625, 2.5, 0.015625, 1.0625]  # the last six: ties, rounded as JavaScript does
_NOT_NUMBERS = ["null", '"1.5"', "true", "NaN", "Infinity", "-Infinity", "[1.0]"]


@pytest.mark.skipif(shutil.which("node") is None, reason="no Node.js to run static/dashboard.js's formatters")
def test_the_dashboard_scripts_formatters_write_what_python_writes() -> None:
    script = DASHBOARD_JS.read_text(encoding="utf-8")
    # The script's formatting section, as it is: from its heading to the next one.
    section = re.search(r"^ *// -- formatting.*?$(.*?)^ *// -- ", script, re.M | re.S)
    assert section is not None, "static/dashboard.js has no formatting section"
    program = section.group(1) + f"""
const figures = {json.dumps(_FIGURES)}, notNumbers = [{", ".join(_NOT_NUMBERS)}];
const out = {{}};
for (const f of [{", ".join(_MIRRORED)}]) out[f.name] = [figures.map(v => f(v)), notNumbers.map(v => f(v))];
console.log(JSON.stringify(out));
"""
    written = json.loads(subprocess.run(["node", "-e", program], capture_output=True, text=True, check=True,
                                        timeout=30).stdout)
    for name, python in _MIRRORED.items():
        js_figures, js_missing = written[name]
        assert js_figures == [python(v) for v in _FIGURES], name
        assert js_missing == [MISSING] * len(_NOT_NUMBERS), name


def test_a_problem_is_its_bundled_id_or_the_posted_source_hash() -> None:
    assert problem_label("level1/softmax", "ab" * 32) == "level1/softmax"
    assert problem_label(None, "0123456789abcdef") == "posted 0123456789"
