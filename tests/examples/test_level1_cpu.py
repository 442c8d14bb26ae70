"""Every level-1 scripted demo on the CPU target through the real referee: the fast example passes
(correct and timed) and the script's draft fails (``wrong``) or passes (``slow``) as its turns
say. One compile per problem: the draft shares the fast example's build."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.providers.scripted import script_for
from agent.providers.scripted_candidates import LEVEL1_DEMOS, Level1Demo
from vocabulary.evaluation import Depth
from harness import HarnessOptions, Referee, Timeouts, TimingOptions
from vocabulary.verdict import Stage, Status
from vocabulary.stages import StageEvent
from problems import load_problem

pytestmark = pytest.mark.slow

QUICK_TIMING = TimingOptions(warmup_ms=5, min_repeats=5, max_time_s=0.3, input_sets=2)
#: The demos `make test` runs (a slow draft and a wrong one: one compile each, and the argmax build
#: serves tests/cli/test_optimize_tty.py too); the other eleven carry the ``examples`` mark and run
#: with `make test-examples` (about 10 minutes on two idle cores).
IN_EVERY_RUN = {"softmax", "argmax"}


@pytest.mark.parametrize("demo", [d if d.name in IN_EVERY_RUN else pytest.param(d, marks=pytest.mark.examples)
                                  for d in LEVEL1_DEMOS], ids=lambda d: d.name)
def test_level1_cpu_demo_candidates(demo: Level1Demo, harness_cache: Path) -> None:
    options = HarnessOptions(cache_dir=harness_cache, secret_seed=1717, compile_baseline=False,
                             timing=QUICK_TIMING, timeouts=Timeouts(trial_s=20.0, load_s=120.0, timing_s=60.0))
    _, sources = script_for(demo.problem_id, "cpu")
    seen: list[StageEvent] = []
    with Referee(load_problem(demo.problem_id), "cpu", options, on_stage=seen.append) as referee:
        fast = referee.evaluate(sources["fast"])
        fast_stages = [(e.stage.value, e.phase.value) for e in seen]
        seen.clear()
        draft = referee.evaluate(sources[demo.draft], Depth.CORRECTNESS)
    # The live view's stages: one started and one finished each, in order; a cached build,
    # header or baseline sends none.
    assert fast_stages[-6:] == [(s, p) for s in ("load", "correctness", "timing") for p in ("started", "finished")]
    assert [p for _, p in fast_stages] == ["started", "finished"] * (len(fast_stages) // 2)
    assert {s for s, _ in fast_stages} <= {"header_build", "reference_start", "baselines", "compile", "load",
                                           "correctness", "timing"}
    assert [(e.stage.value, e.phase.value) for e in seen][-4:] == [
        ("load", "started"), ("load", "finished"), ("correctness", "started"), ("correctness", "finished")]
    print(f"{demo.name}: fast {fast.status.value} {fast.speedup_vs_eager} x eager, compile "
          f"{fast.compile.seconds if fast.compile else None} s; draft {draft.status.value}: {draft.message[:120]}")
    assert fast.correct and fast.stage is Stage.DONE, fast.message + fast.log
    # A kernel far faster than eager's dispatches on tiny CPU sizes is quarantined, not failed.
    assert fast.status in (Status.PASS, Status.SUSPICIOUS), fast.message
    assert fast.timing is not None and fast.timing.median_ms > 0
    assert draft.compile is not None and draft.compile.ok
    if demo.draft == "slow":
        assert draft.status is Status.PASS, draft.message + draft.log
    else:
        assert draft.status is Status.FAIL and draft.stage is Stage.CORRECTNESS, draft.message
