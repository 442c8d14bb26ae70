"""The re-time of a quarantined (``suspicious``) candidate, shared by the worker and ``eval``.

A candidate is quarantined for a speedup over ``suspicious_speedup`` or for beating the roofline.
It is re-timed in a fresh Referee (fresh reference and candidate processes) with new secret
seeds (new weights and inputs: cached outputs fail) and hardened timing (a number of calls the
trusted side dictates; the reported median is bounded by the trusted clock less the loop's
overhead measured in the reference process: a patched clock or a forged reply fails with
``clock_disagrees``). One that passes again is believed; the roofline check stays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from harness.evaluate import evaluate
from harness.options import HarnessOptions, Target
from harness.verdict import Status, Verdict
from problems.spec import Problem

__all__ = ["RETIME_MIN_REPEATS", "evaluate_with_retime", "retime_options"]

#: Timed calls at least, in a re-time (the quick default is 20); hardened timing dictates about
#: ``max_time_s`` of calls at the eager baseline's speed, between this and ``max_repeats``.
RETIME_MIN_REPEATS = 50


def retime_options(options: HarnessOptions) -> HarnessOptions:
    """The options of a re-time: fresh secret seeds, no speedup ceiling, hardened timing."""
    timing = replace(options.timing, min_repeats=max(options.timing.min_repeats, RETIME_MIN_REPEATS),
                     max_time_s=2 * options.timing.max_time_s)
    return options.replace(secret_seed=None, suspicious_speedup=float("inf"), timing=timing,
                           hardened_timing=True)


def evaluate_with_retime(problem: Problem, candidate_source: str, target: Target | str, options: HarnessOptions,
                         on_retime: Callable[[Verdict], None] | None = None) -> tuple[Verdict, Verdict | None]:
    """Evaluate; a ``suspicious`` verdict is re-timed (`retime_options`) before the answer
    (``on_retime`` is told of the first verdict as the re-time starts).

    Returns:
        ``(answer, quarantined)``: the re-time's verdict and the first one when the first was
        suspicious, else the first verdict and None.
    """
    first = evaluate(problem, candidate_source, target, options)
    if first.status is not Status.SUSPICIOUS:
        return first, None
    if on_retime is not None:
        on_retime(first)
    return evaluate(problem, candidate_source, target, retime_options(options)), first
