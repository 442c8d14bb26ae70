"""The re-time of a quarantined (``suspicious``) candidate, shared by the worker and ``eval``.

A candidate is quarantined for a speedup over ``suspicious_speedup`` or for beating the roofline,
and a job's best (and each ``bench`` entry) is re-judged before it is called best whatever its
speedup. It is re-timed in a fresh Referee (fresh reference and candidate processes) with new
secret seeds (new weights and inputs: cached outputs fail) and a longer metered run (every run is
bounded by the trusted clock and audited, `harness.meter`). One that passes again is believed;
the roofline check stays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from harness.evaluate import evaluate
from harness.options import HarnessOptions
from problems.spec import Problem
from vocabulary.evaluation import Target
from vocabulary.verdict import Status, Verdict

__all__ = ["RETIME_MIN_REPEATS", "evaluate_with_retime", "retime_options"]

#: Timed calls at least, in a re-time (the quick default is 20).
RETIME_MIN_REPEATS = 50


def retime_options(options: HarnessOptions) -> HarnessOptions:
    """The options of a re-time: fresh secret seeds, no speedup ceiling, a longer run."""
    timing = replace(options.timing, min_repeats=max(options.timing.min_repeats, RETIME_MIN_REPEATS),
                     max_time_s=2 * options.timing.max_time_s)
    return options.replace(secret_seed=None, suspicious_speedup=float("inf"), timing=timing, rejudge=True)


def evaluate_with_retime(problem: Problem, candidate_source: str, target: Target | str, options: HarnessOptions,
                         on_retime: Callable[[Verdict], None] | None = None, *,
                         always: bool = False) -> tuple[Verdict, Verdict | None]:
    """Evaluate; a ``suspicious`` verdict is re-timed (`retime_options`) before the answer, and
    with ``always`` a verified one is re-judged the same way (a bench entry: figures that count
    come from a fresh process with fresh seeds). ``on_retime`` is told of the first verdict as
    the re-time starts.

    Returns:
        ``(answer, first)``: the re-time's verdict and the first one when there was a re-time,
        else the first verdict and None.
    """
    first = evaluate(problem, candidate_source, target, options)
    if first.status is not Status.SUSPICIOUS and not (always and first.is_verified):
        return first, None
    if on_retime is not None:
        on_retime(first)
    return evaluate(problem, candidate_source, target, retime_options(options)), first
