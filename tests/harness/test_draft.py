"""The candidate run's judgements, as pure steps over a frozen draft (no sandbox, no process)."""

from __future__ import annotations

from dataclasses import replace

from harness.draft import (
    Draft,
    Outcome,
    decisive_outcome,
    failed_trials,
    metered_failure,
    torch_ops_detail,
    weights_note,
    with_extension_check,
    with_loaded,
    with_metered_run,
    with_trial,
)
from harness.meter.clock import Calibration, check_clock
from harness.meter.drive import MeteredCall, MeteredRun
from harness.meter.frames import DoneFrame, DoneStatus
from harness.protocol.candidate import Loaded, TrialReply
from harness.protocol.meter import MeterEnd
from harness.protocol.reference import Compared
from harness.seeds import TrialSpec
from vocabulary.causes import KernelError
from vocabulary.evaluation import Depth
from vocabulary.verdict import ErrorKind, Stage, Status

DRAFT = Draft(depth=Depth.BENCHMARK, extensions=("kl_ext",))
PASSED = Compared(passed=True, max_abs_err=1e-7, mean_abs_err=1e-8, mismatch_frac=0.0, message="")
FAILED = Compared(passed=False, max_abs_err=0.5, mean_abs_err=0.1, mismatch_frac=0.25, message="25% outside")


def _calls(*pairs: tuple[float, float]) -> tuple[MeteredCall, ...]:
    """Timed calls of (sample, trusted round trip), in milliseconds."""
    return tuple(MeteredCall(i, i % 2, 7, 8, sample, trusted, warmup=False)
                 for i, (sample, trusted) in enumerate(pairs))


def test_a_trial_adds_its_comparison_and_its_known_flags_once() -> None:
    reply = TrialReply(output={}, flags=("tf32_enabled", "not_a_flag", "tf32_enabled"))
    first = with_trial(DRAFT, TrialSpec(0, 11), reply, PASSED, pure=False)
    second = with_trial(first, TrialSpec(1, 12, kind="variant"), reply, FAILED, pure=False)
    assert DRAFT.trials == () and first.flags == ("tf32_enabled",) and second.flags == ("tf32_enabled",)
    assert [(t.seed_index, t.kind, t.passed) for t in second.trials] == [(0, "random", True), (1, "variant", False)]
    outcome = failed_trials(second)
    assert outcome == Outcome(Status.FAIL, Stage.CORRECTNESS, "1 of 2 trials failed; trial 1 (variant): 25% outside")
    assert failed_trials(first) is None
    stopped = failed_trials(second, planned=5)
    assert stopped is not None and stopped.message.startswith("1 of 2 trials failed (3 later trials not run); trial 1")


def test_what_an_extension_raised_is_kept_with_its_trial() -> None:
    raised = KernelError(function="kl_ext.f", error="RuntimeError: odd batch")
    judged = with_trial(DRAFT, TrialSpec(3, 11, kind="shape:0"), TrialReply(output={}, kernel_errors=(raised,)),
                        PASSED, pure=False)
    assert judged.kernel_errors == (replace(raised, trial=3),) and judged.trials[0].passed


def test_the_load_says_how_the_weights_went_in_and_what_raised() -> None:
    raised = KernelError(function="kl_ext.probe", error="RuntimeError: x")
    loaded = with_loaded(Draft(depth=Depth.BENCHMARK), Loaded(extensions=("kl_ext",), kernel_errors=(raised,),
                                                              renamed=(("conv.weight", "w"), ("bias", "b"))))
    assert loaded.extensions == ("kl_ext",) and loaded.kernel_errors == (raised,)
    assert loaded.notes == (weights_note((("conv.weight", "w"), ("bias", "b"))),)
    assert loaded.notes[0].endswith("loaded by registration order (KernelBench builds both models from the same "
                                    "seed, so names never mattered): conv.weight -> w, bias -> b")
    many = tuple((f"p{i}", f"q{i}") for i in range(10))
    assert weights_note(many).endswith("p7 -> q7 and 2 more")
    assert with_loaded(Draft(depth=Depth.BENCHMARK), Loaded(extensions=())).notes == ()  # by name: nothing to note


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


def test_a_metered_run_raises_what_it_found() -> None:
    run = MeteredRun(calls=_calls((1.0, 1.1)))
    assert with_metered_run(DRAFT, run, MeterEnd(calls=1), audits_match=True).flags == ()
    assert with_metered_run(DRAFT, run, MeterEnd(calls=1), audits_match=False).flags == ("timed_output_mismatch",)
    threads = with_metered_run(DRAFT, run, MeterEnd(calls=1, flags=("background_threads", "bogus")), audits_match=True)
    assert threads.flags == ("background_threads",)
    tampered = with_metered_run(DRAFT, run, MeterEnd(calls=1, tampered=("harness.sandboxed.contract.tf32_is_off",)),
                                audits_match=True)
    outcome = decisive_outcome(tampered, Stage.INTEGRITY)
    assert outcome is not None and "changed the referee's code" in outcome.message
    assert "harness.sandboxed.contract.tf32_is_off" in outcome.message
    broken = with_metered_run(DRAFT, replace(run, protocol_error="the sandbox answered out of turn during call 3"),
                              None, audits_match=True)
    assert broken.flags == ("timing_protocol_broken",) and metered_failure(replace(run, protocol_error="x")) is None


def test_how_a_run_the_candidate_ended_is_told() -> None:
    def ended(status: DoneStatus, message: str) -> MeteredRun:
        return MeteredRun(calls=(), failure=DoneFrame(status, 3, 9, 0.0, message))

    raised = metered_failure(ended(DoneStatus.FORWARD_RAISED, "forward raised ValueError: no"))
    assert raised == Outcome(Status.ERROR, Stage.TIMING, "forward raised ValueError: no (while timed)",
                             ErrorKind.CANDIDATE)
    lazy = ended(DoneStatus.BAD_OUTPUT, "forward returned Lazy")
    assert metered_failure(lazy) is None
    assert with_metered_run(DRAFT, lazy, None, audits_match=True).flags == ("timed_output_not_plain",)
    assert with_metered_run(DRAFT, ended(DoneStatus.TF32, "x"), None, audits_match=True).flags == ("tf32_enabled",)


def test_the_trusted_clock_bounds_the_samples_call_by_call() -> None:
    calibration = Calibration.from_calls(_calls(*[(1.0, 1.2)] * 10))  # the loop costs 0.2 ms a call
    assert (calibration.clean_ms, calibration.spread_ms) == (calibration.overhead_ms, 0.0)
    assert check_clock(_calls(*[(5.0, 5.2)] * 10), calibration).agrees
    # Every call scaled by 0.9: 0.5 ms more per call than the loop costs.
    forged = check_clock(_calls(*[(4.5, 5.2)] * 10), calibration)
    assert not forged.agrees and round(forged.excess_ms, 6) == 0.5 and "500 us more" in forged.detail()
    # Noise only lengthens round trips: a few slow calls do not look like a forgery.
    assert check_clock(_calls(*[(5.0, 5.2)] * 8, (5.0, 9.0), (5.0, 12.0)), calibration).agrees
    # Most calls forged (what moving a median takes), the fastest honest: the median breaks.
    assert not check_clock(_calls(*[(5.0, 5.2)] * 4, *[(2.0, 5.2)] * 6), calibration).agrees
    # Round trips with less around the call than the harness's loop needs: another loop answered.
    short = check_clock(_calls(*[(1.0, 1.0)] * 10), calibration)
    assert not short.agrees and short.too_short and "not the harness's" in short.detail()
    # Calibrated again on a busier host (its lowest gap 0.5 ms): the window spans both, so an
    # honest run in a quiet moment between them is not called another loop.
    both = calibration.widest(Calibration.from_calls(_calls(*[(1.0, 1.5)] * 10)))
    assert (both.lowest_clean_ms, both.clean_ms) == (calibration.clean_ms, 0.5)
    assert check_clock(_calls(*[(5.0, 5.3)] * 10), both).agrees and check_clock(_calls(*[(5.0, 5.2)] * 10), both).agrees
    assert not check_clock(_calls(*[(4.0, 5.2)] * 10), both).agrees  # above the higher one: still a forgery
    # A saturated host: the gaps split into calls that ran through (0.2 ms) and calls that waited
    # out a scheduler slice (4 ms more). A run whose fastest fifth waited is honest: the floor and
    # the median are allowed the calibration's spread...
    loaded = Calibration.from_calls(_calls(*[(1.0, 1.2)] * 5, *[(1.0, 5.2)] * 5))
    waited = _calls(*[(5.0, 5.2)] * 2, *[(5.0, 9.2)] * 8)
    assert not check_clock(waited, calibration).agrees and check_clock(waited, loaded).agrees
    assert round(check_clock(waited, loaded).allowed_ms, 3) == round(4 * loaded.spread_ms, 3)
    # ... while a forgery of every call (3 ms each, the median inside that spread) still moves the
    # least gap, held as tightly as on a quiet host.
    every = check_clock(_calls(*[(2.0, 5.2)] * 2, *[(2.0, 9.2)] * 8), loaded)
    assert not every.agrees and round(every.excess_ms, 6) == 3.0 and round(every.allowed_ms, 6) == 1.1
    # Forty calibration calls of which three ran through: the least of ten calls is held to the
    # fourth lowest gap (where the least of ten draws lies), the least of forty to the lowest.
    forty = Calibration.from_calls(_calls(*[(1.0, 1.2)] * 3, *[(1.0, 3.2)] * 37))
    assert (round(forty.clean_for(10), 6), round(forty.clean_for(40), 6)) == (2.2, 0.2)
    assert check_clock(_calls(*[(5.0, 7.3)] * 10), forty).agrees
    assert not check_clock(_calls(*[(5.0, 7.3)] * 40), forty).agrees
    assert not check_clock(_calls(*[(2.0, 7.3)] * 10), forty).agrees  # 3 ms of every call forged
    # Calibrated again with fewer calls: quantile by quantile, the higher gap of the two.
    envelope = forty.widest(Calibration.from_calls(_calls(*[(1.0, 1.7)] * 10)))
    assert len(envelope.gaps) == 40 and round(envelope.clean_ms, 6) == 0.7 and round(envelope.gaps[-1], 6) == 2.2
    assert round(envelope.lowest_clean_ms, 6) == 0.2 and envelope.calls == 50
    # A sample longer than its whole round trip is no clock at all.
    impossible = check_clock(_calls(*[(5.0, 5.2)] * 9, (50.0, 5.2)), calibration)
    assert not impossible.agrees and "more time than their whole round trip" in impossible.detail()
