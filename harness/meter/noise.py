"""A metered run's samples as a `Timing`, with the warnings that travel with it. Standard library only.

On the CPU the loop times warm calls (no flush: writing a 32 MB buffer before each call woke
torch's worker threads and left them parked, so a 26 us op measured 58.8 ms, the loop timing
thread scheduling rather than the kernel); like ``torch.utils.benchmark`` (within 5 % of its
``blocked_autorange`` from 20 us to 100 ms on an idle machine, benchmarks/cpu_timing_fidelity.py).
On a loaded host (load average over the usable cores) or with a wide spread, the timing carries a
``noisy`` warning: other work on the cores only ever slows calls down, so such a median overstates
the kernel's time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from vocabulary.timing import HOST_LOADED_WARNING, Timing

__all__ = ["NOISY_CPU_SPREAD", "NOISY_REL_STDERR", "cpu_load_warnings", "timing_of"]

#: Warn when the run ends noisier than this (relative standard error).
NOISY_REL_STDERR = 0.02
#: Warn when a CPU timing's interquartile range exceeds this fraction of its median.
NOISY_CPU_SPREAD = 0.25
#: Under this median, launch overhead dominates.
_INDICATIVE_MS = 0.05


def _getloadavg() -> tuple[float, float, float]:
    return os.getloadavg()


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def cpu_load_warnings(timing: Timing) -> list[str]:
    """``noisy`` warnings of a CPU timing taken on a loaded host or with a wide spread."""
    warnings = []
    try:
        load, cores = _getloadavg()[0], _usable_cores()
    except (OSError, AttributeError):  # a platform without them: no load figure
        load, cores = 0.0, 1
    if load > cores:
        warnings.append(f"{HOST_LOADED_WARNING} (load average {load:.1f} on {cores} usable cores): "
                        "the CPU figures may be inflated")
    if timing.median_ms > 0 and timing.iqr_ms / timing.median_ms > NOISY_CPU_SPREAD:
        warnings.append(f"noisy: interquartile range {100 * timing.iqr_ms / timing.median_ms:.0f}% of the median")
    return warnings


def timing_of(samples_ms: Sequence[float], *, cuda: bool) -> Timing:
    """The `Timing` of a metered run's timed samples, with its warnings."""
    clock = "cuda_events" if cuda else "monotonic"
    timing = Timing.from_samples(samples_ms, clock=clock)
    warnings = []
    if timing.rel_stderr > NOISY_REL_STDERR:
        warnings.append(f"noisy: relative standard error {100 * timing.rel_stderr:.1f}% after {timing.n} runs")
    if not cuda:
        warnings += cpu_load_warnings(timing)
    if timing.median_ms < _INDICATIVE_MS:
        warnings.append("under 50 us: launch overhead dominates; figures are indicative only")
    return Timing.from_samples(samples_ms, clock=clock, warnings=warnings)
