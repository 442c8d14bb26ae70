"""The iteration benchmark (benchmarks/iterations.py): its mix, and a two-candidate CPU run on the
shared harness cache (the seed 1 example's build is shared with the harness tests)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.iterations import build_mix, comment_variant, summarise, to_markdown
from tests.support.paths import REPO


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_the_mix_has_twenty_candidates_for_both_seeds(target: str) -> None:
    mix = build_mix(target)
    assert len(mix) >= 20
    assert {c.problem for c in mix} >= {"level2/conv_tanh_scale_bias_maxpool", "level2/conv_bn_scale_train"}
    variants = [c for c in mix if "+" in c.name]
    assert len({hashlib.sha256(c.source.encode()).hexdigest() for c in variants}) == len(variants)
    assert all("ModelNew" in c.source for c in mix)


def test_a_comment_variant_keeps_the_torch_include_first() -> None:
    source = 'CPP = r"""\n#include <torch/extension.h>\nint f();\n"""\n'
    changed = comment_variant(source, "variant 1")
    assert changed != source and '"""\n#include <torch/extension.h>\n// variant 1\n' in changed


def test_a_two_candidate_cpu_run_writes_its_figures(harness_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "iterations_cpu"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.iterations", "--target", "cpu", "--only", "seed1/fast,seed1/wrong",
         "--cache-dir", str(harness_cache), "--baselines-dir", str(tmp_path / "baselines"), "--out", str(out),
         "--cold-samples", "0", "--pch-off-samples", "0", "--no-pch-warm", "--limit-s", "400",
         "--timing-max-s", "0.3", "--eval-samples", "1", "--think-s", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(out.with_suffix(".json").read_text())
    by_name = {c["name"]: c for c in report["candidates"]}
    fast, wrong = by_name["seed1/fast"], by_name["seed1/wrong"]
    assert fast["status"] == "pass" and wrong["status"] == "fail" and wrong["kind"] == "wrong"
    assert fast["kind"] in ("fast", "correct")  # faster than eager on an idle host; two shared cores may say not
    # The verdicts' own stage seconds: the compile's (in the pool), then the lane evaluation's. (Not
    # summed exactly: the Referee keeps one tally for its evaluations, and the pool's next compile
    # runs beside this one's lane evaluation.)
    assert {"compile", "timing"} <= set(fast["stage_seconds"]) and fast["lane_s"] > 0
    assert "timing" not in wrong["stage_seconds"]
    # Floors: the kernel's median × the calls the loop made.
    assert fast["floors"]["timing"] == pytest.approx(fast["median_ms"] * fast["floors"]["timed_calls"] / 1000, rel=1e-3)
    assert fast["floors"]["timing"] <= fast["stage_seconds"]["timing"]
    table = report["phases"]["pipeline"]["time_to_verdict"]
    assert table["attempts"] == 2 and {k["kind"] for k in table["kinds"]} >= {"wrong", "all"}
    assert {s["stage"] for s in table["stages"]} >= {"compile", "load", "correctness", "timing"}
    assert report["summary"]["verdicts_per_lane_hour"] == table["verdicts_per_lane_hour"] > 0
    assert report["summary"]["attempts_per_hour"] > 0
    assert [r["status"] for r in report["phases"]["seed1_evaluations"]] == ["pass"]
    assert report["summary"]["seed1_evaluation_median_s"] > 0 and report["summary"]["seed1_lane_median_s"] > 0
    markdown = out.with_suffix(".md").read_text()
    assert "attempts per GPU-hour" in markdown and "verdicts per lane-hour**" in markdown
    assert "| wrong | correctness | 1 |" in markdown and "| timing | 1 |" in markdown
    assert summarise(report) == report["summary"] and to_markdown(report) == markdown
