"""The seed-2 CPU example through the real referee, in both modes (one build serves both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import HarnessOptions, Referee, Timeouts, TimingOptions
from problems import load_problem
from tests.support.paths import REPO
from vocabulary.flags import Flag
from vocabulary.verdict import Stage, Status

pytestmark = pytest.mark.slow

SEED2_CPU = (REPO / "examples" / "seed2_train_cpu.py").read_text()
QUICK_TIMING = TimingOptions(warmup_ms=5, min_repeats=5, max_time_s=0.3, input_sets=2)


@pytest.mark.parametrize("problem_id", ["level2/conv_bn_scale_train", "level2/conv_bn_scale_eval"])
def test_seed2_cpu_example_passes(problem_id: str, harness_cache: Path) -> None:
    options = HarnessOptions(
        cache_dir=harness_cache,
        secret_seed=4321,
        compile_baseline=False,
        # The question here is build and correctness: on a loaded 2-core host eager's time swings
        # enough to cross the quarantine's 10x (CI: once); the quarantine has its own tests.
        suspicious_speedup=float("inf"),
        timing=QUICK_TIMING,
        timeouts=Timeouts(trial_s=8.0, load_s=60.0, timing_s=60.0),
    )
    with Referee(load_problem(problem_id), "cpu", options) as referee:
        verdict = referee.evaluate(SEED2_CPU)
        if verdict.correct and set(verdict.flags) - {Flag.HOST_LOADED} == {Flag.CLOCK_DISAGREES}:
            # The refusal docs/integrity.md accepts on a host whose speed changes within a run
            # (this example alone on the 2-core VM: 6 of 68 evaluations, one `make test`); the
            # clock's own tests are tests/harness/test_meter.py's. One more evaluation, as a user
            # would re-time it.
            verdict = referee.evaluate(SEED2_CPU)
    # The roofline quarantine is not this test's question either: a roofline of rates measured
    # while the host was loaded sat above an honest 2.5 ms (eager 17 ms); such a roofline no longer
    # quarantines (tests/harness/test_pure.py), but a burst of load can still lower an "unloaded" one.
    quarantined = (verdict.status is Status.SUSPICIOUS
                   and set(verdict.flags) - {Flag.HOST_LOADED} == {Flag.FASTER_THAN_ROOFLINE})
    assert verdict.status is Status.PASS or quarantined, verdict.message + verdict.log
    assert verdict.stage is Stage.DONE and verdict.correct
    assert all(t.passed and t.max_abs_err is not None and t.max_abs_err < 1e-4 for t in verdict.trials)
    assert verdict.compile is not None and verdict.compile.extensions[0].name == "kl_seed2_cpu"
