"""The candidate run's judgements, as pure steps over a frozen draft (no stage, no process)."""

from __future__ import annotations

from dataclasses import replace

from harness.draft import (
    Draft,
    Outcome,
    TimingPlan,
    decisive_outcome,
    failed_trials,
    hardened_pick,
    kept_in_order,
    needs_second_run,
    torch_ops_detail,
    with_extension_check,
    with_timed_run,
    with_trial,
)
from harness.options import Depth, TimingOptions
from harness.protocol.candidate import KeptOutput, TimeReply, TrialReply
from harness.protocol.reference import Compared
from harness.seeds import TrialSpec
from harness.verdict import Stage, Status, Timing

DRAFT = Draft(depth=Depth.BENCHMARK, extensions=("kl_ext",))
PASSED = Compared(passed=True, max_abs_err=1e-7, mean_abs_err=1e-8, mismatch_frac=0.0, message="")
FAILED = Compared(passed=False, max_abs_err=0.5, mean_abs_err=0.1, mismatch_frac=0.25, message="25% outside")
PLAN = TimingPlan(request=TimingOptions(), sets=(0, 1), hardened=False)
HARDENED = TimingPlan(request=TimingOptions(min_warmup_calls=3, fixed_calls=10), sets=(0, 1), hardened=True)


def _timed(samples: tuple[float, ...], kept: tuple[tuple[int, int], ...] = ((0, 20), (1, 21)),
           flags: tuple[str, ...] = ()) -> TimeReply:
    return TimeReply(timing=Timing(samples_ms=samples), flags=flags,
                     kept=tuple(KeptOutput(index=i, call=c, output={"kind": "file"}) for i, c in kept))


def test_a_trial_adds_its_comparison_and_its_known_flags_once() -> None:
    reply = TrialReply(output={}, flags=("tf32_enabled", "not_a_flag", "tf32_enabled"))
    first = with_trial(DRAFT, TrialSpec(0, 11), reply, PASSED, pure=False)
    second = with_trial(first, TrialSpec(1, 12, kind="variant"), reply, FAILED, pure=False)
    assert DRAFT.trials == () and first.flags == ("tf32_enabled",) and second.flags == ("tf32_enabled",)
    assert [(t.seed_index, t.kind, t.passed) for t in second.trials] == [(0, "random", True), (1, "variant", False)]
    outcome = failed_trials(second)
    assert outcome == Outcome(Status.FAIL, Stage.CORRECTNESS, "1 of 2 trials failed; trial 1 (variant): 25% outside")
    assert failed_trials(first) is None


def test_the_pure_policy_flags_torch_compute_and_names_the_ops() -> None:
    reply = TrialReply(output={}, ops=("empty", "addmm", "view"))
    judged = with_trial(DRAFT, TrialSpec(0, 1), reply, PASSED, pure=True)
    assert judged.torch_ops == ("addmm",) and judged.flags == ("torch_compute_in_pure_forward",)
    assert torch_ops_detail(judged) == " (torch ops in forward: addmm)"
    assert with_trial(DRAFT, TrialSpec(0, 1), reply, PASSED, pure=False).flags == ()  # mixed: ops not judged


def test_the_extension_must_do_real_work() -> None:
    assert with_extension_check(replace(DRAFT, extensions=()), noop_passed=None).flags == ("no_custom_kernel",)
    assert with_extension_check(DRAFT, noop_passed=True).flags == ("extension_does_no_work",)
    assert with_extension_check(DRAFT, noop_passed=False).flags == ()
    assert with_extension_check(DRAFT, noop_passed=None).flags == ()  # the no-op trial raised: nothing learnt


def test_only_decisive_flags_fail_and_the_message_names_each() -> None:
    quarantined = replace(DRAFT, flags=("speedup_over_limit",))
    assert decisive_outcome(quarantined, Stage.INTEGRITY) is None
    failing = replace(DRAFT, flags=("mutated_inputs", "speedup_over_limit", "tf32_enabled"))
    outcome = decisive_outcome(failing, Stage.INTEGRITY, " (detail)")
    assert outcome is not None and outcome.status is Status.FAIL and outcome.stage is Stage.INTEGRITY
    assert outcome.message == "the candidate modified its inputs; the candidate switched TF32 on (detail)"


def test_the_kept_outputs_must_be_one_per_set_of_this_run() -> None:
    assert kept_in_order(PLAN, _timed((1.0,)), first_call=0)
    assert not kept_in_order(PLAN, _timed((1.0,), kept=((0, 20),)), first_call=0)  # a set not re-checked
    assert not kept_in_order(PLAN, _timed((1.0,), kept=((0, 20), (1, 20))), first_call=0)  # a call twice
    assert not kept_in_order(PLAN, _timed((1.0,)), first_call=21)  # from before this run
    # Hardened: the last call is the dictated one (3 warm-up + 10 timed + 2 re-checked).
    assert kept_in_order(HARDENED, _timed((1.0,), kept=((0, 13), (1, 14))), first_call=0)
    assert not kept_in_order(HARDENED, _timed((1.0,), kept=((0, 12), (1, 13))), first_call=0)


def test_our_clock_bounds_the_reported_samples() -> None:
    honest = with_timed_run(DRAFT, _timed((1.0,) * 10), wall_s=0.5, outputs_match=True)
    assert honest.flags == ()
    assert with_timed_run(DRAFT, _timed((100.0,) * 10), wall_s=0.5, outputs_match=True).flags == ("clock_disagrees",)
    assert with_timed_run(DRAFT, _timed((0.0, 1.0)), wall_s=0.5, outputs_match=True).flags == ("clock_disagrees",)
    assert with_timed_run(DRAFT, _timed(()), wall_s=0.5, outputs_match=True).flags == ("clock_disagrees",)
    mismatch = with_timed_run(DRAFT, _timed((1.0,), flags=("background_threads",)), wall_s=0.5, outputs_match=False)
    assert mismatch.flags == ("background_threads", "timed_output_mismatch")


def test_hardened_timing_runs_again_only_when_out_of_bounds_and_keeps_the_first_that_fits() -> None:
    fits, slow_wall = Timing(samples_ms=(5.0,) * 10), 15 * 5e-3
    forged = Timing(samples_ms=(0.01,) * 10)
    assert not needs_second_run(DRAFT, PLAN, forged, 10.0, 0.0)  # adaptive: one run
    assert not needs_second_run(DRAFT, HARDENED, fits, slow_wall, 0.0)
    assert needs_second_run(DRAFT, HARDENED, forged, slow_wall, 0.0)
    assert not needs_second_run(replace(DRAFT, flags=("mutated_inputs",)), HARDENED, forged, slow_wall, 0.0)
    draft, timing, detail = hardened_pick(DRAFT, HARDENED, ((forged, slow_wall), (fits, slow_wall)), 0.0)
    assert draft.flags == () and timing is fits and "hardened timing: 15 calls" in detail
    draft, timing, detail = hardened_pick(DRAFT, HARDENED, ((forged, slow_wall), (forged, slow_wall)), 0.0)
    assert draft.flags == ("clock_disagrees",) and timing is forged and "explains at most" in detail
