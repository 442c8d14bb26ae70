"""Hardened timing's arithmetic, as pure functions: how many calls the trusted side dictates, and
whether the trusted wall clock explains the median a candidate reported.

A quarantined speedup is re-timed with a number of calls the trusted side dictates; the wall
clock of that request, less the loop's overhead measured in the reference process, must be
explained by the reported median times the calls made (see docs/integrity.md). Stdlib only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from harness.options import TimingOptions
from harness.verdict import Timing

__all__ = ["HARDENED_FIXED_S", "HARDENED_MARGIN", "HARDENED_OVERHEAD_SLACK", "calls_made", "dictated_calls",
           "hardened_bound"]

#: The trusted wall clock of the candidate's timing request, less the loop's overhead measured in
#: the reference process, must be explained by the reported median times the calls made, up to
#: this factor (noise spikes are in the wall but not in a median)...
HARDENED_MARGIN = 3.0
#: ...plus this fraction of the measured overhead (the candidate's loop may cost up to twice what
#: the reference's did: a busier host, other caches)...
HARDENED_OVERHEAD_SLACK = 1.0
#: ...plus this many seconds (replies, exports and process scheduling differ a little).
HARDENED_FIXED_S = 0.05


def dictated_calls(eager_ms: float, timing: TimingOptions) -> int:
    """The timed calls of a hardened re-time: enough for about ``max_time_s`` of calls as slow as
    eager (a candidate no faster than eager that claims otherwise leaves that much time its
    reported median cannot explain), within ``min_repeats`` … ``max_repeats``, at least one.

    Args:
        eager_ms: the eager baseline's median (0 or less: unknown, ``min_repeats`` calls).
        timing: the harness's timing options.
    """
    wanted = math.ceil(timing.max_time_s * 1e3 / eager_ms) if eager_ms > 0 else timing.min_repeats
    calls = max(timing.min_repeats, min(max(timing.max_repeats, timing.min_repeats), wanted))
    return max(1, calls)


def calls_made(request: TimingOptions, sets: Sequence[int]) -> int:
    """Calls of forward in a hardened timing request: warm-up, timed, one re-checked per input set."""
    return request.min_warmup_calls + request.fixed_calls + len(sets)


def hardened_bound(timing: Timing, wall_s: float, overhead_s: float, request: TimingOptions,
                   sets: Sequence[int]) -> tuple[bool, str]:
    """Whether the reported median is far below what the trusted clock allows, and the figures for
    the verdict's message.

    One-sided: noise only ever makes the wall longer, so it can only make an honest median look
    more plausible. A sample count other than the dictated one is disagreement outright.

    Args:
        timing: the candidate's reported samples.
        wall_s: the trusted wall clock of the whole request.
        overhead_s: the loop's overhead for the same request, measured in the reference process.
        request: the timing request (``min_warmup_calls``, ``fixed_calls``).
        sets: the input sets timed (one re-checked call each).
    """
    calls = calls_made(request, sets)
    unexplained_s = wall_s - overhead_s
    allowed_s = (HARDENED_MARGIN * calls * timing.median_ms / 1e3 + HARDENED_OVERHEAD_SLACK * overhead_s
                 + HARDENED_FIXED_S)
    detail = (f" (hardened timing: {calls} calls took {wall_s:.3f} s by the trusted clock, of which "
              f"{overhead_s:.3f} s is the loop's overhead measured in the reference process; a reported "
              f"median of {timing.median_ms:.4g} ms explains at most {allowed_s:.3f} s of the "
              f"{unexplained_s:.3f} s left)")
    if timing.n != request.fixed_calls:
        return True, f" (hardened timing: {timing.n} samples reported, {request.fixed_calls} dictated)"
    return unexplained_s > allowed_s, detail
