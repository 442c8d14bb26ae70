"""The trusted clock's bound on a metered run, per call: pure arithmetic, standard library only.

Each call of a metered run has two figures: the loop's sample (``sample_ms``, measured inside the
sandbox) and the trusted side's round trip (``trusted_ms``: GO sent to DONE received). Their
difference, the *gap*, is what the loop does around the call (loading inputs, the L2 flush,
synchronising, capturing the output, two trips through the socket): the same for any forward, so
it is measured with the reference model in the trusted reference process (`Calibration`). A
candidate whose samples are smaller than the time its calls took shows larger gaps. Pairing the
two figures of each call leaves the kernel's own noise out; what remains is the host's: other work
only ever lengthens a round trip, so gaps have a floor and a tail. Three bounds, all per call:

- the least gap: a forgery of every call shifts every gap, the least disturbed call's too; an
  honest run's least gap is a call that ran through, whatever the load, so it is held tightly
  against what the least of as many calibration calls reached (`Calibration.clean_for`), within
  ``max(ABSOLUTE_SLACK_MS, RELATIVE_SLACK × the median sample, LOOP_SLACK × the loop's cost)``;
- the floor (the gaps' `FLOOR_QUANTILE`), from below: gaps much *shorter* than the harness's loop
  needs around a call (its inputs, its flush, its capture) mean a loop that is not the harness's
  answered;
- the median, from above: a forgery of most calls (what it takes to move a median) shifts the
  median gap.

The last two are allowed ``SPREAD_FACTOR ×`` the calibration's spread: on a quiet host the spread
is tiny (0.06 ms of a 1.6 ms CPU loop); on a saturated one the gaps split into calls that ran
through and calls that waited out a scheduler slice, and the floor of a run of twenty calls moves
by several slices from run to run (which is why the least gap, not the floor, holds a forgery of
every call; allowing it the spread too let a 0.9 forgery of a 183 ms CPU kernel pass on a noisy
host, so it is not: on a host oversubscribed until no call of a run runs through, an honest run
can be refused, after a fresh calibration and reruns twice and four times as long). The candidate's
processes are stopped while the loop is calibrated again (`harness.sandbox.SandboxProcess.paused`):
its threads would load the host the calibration measures. Every verdict carries the
allowance of the bound it was held to (`vocabulary.timing.ClockBound`, docs/integrity.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from harness.meter.drive import MeteredCall

__all__ = ["ABSOLUTE_SLACK_MS", "FLOOR_QUANTILE", "LOOP_SLACK", "RELATIVE_SLACK", "SPREAD_FACTOR", "Calibration",
           "ClockCheck", "check_clock"]

#: A per-call excess below this is never called a disagreement (scheduling jitter of two
#: processes and a socket)...
ABSOLUTE_SLACK_MS = 0.05
#: ...nor below this fraction of the reported median: what an honest forward may cost around its
#: timed window that the reference's does not (host work hidden behind the L2 flush on CUDA; a
#: loop that holds its output instead of copying it)...
RELATIVE_SLACK = 0.05
#: ...nor below this fraction of the loop's calibrated cost per call: the cost around a call
#: depends a little on the forward (what it leaves in the caches and the allocator for the flush
#: and the next inputs): honest CPU kernels measured 32-41 % off the reference's loop on a loaded
#: 2-core host, honest re-times on the H200 up to 122 us of its ~350 us. A loop that skips the
#: harness's flush and capture leaves far more than half of it out.
LOOP_SLACK = 0.5
#: The floor and the median are allowed this many times the calibration's spread (its gaps'
#: scaled median absolute deviation: the host's own noise).
SPREAD_FACTOR = 4.0
#: The floor of a run's gaps, held from below: this quantile (a loop that skips the harness's
#: work on most calls, not one odd call).
FLOOR_QUANTILE = 0.2
#: A sample may exceed its own round trip by this much at most (clock granularity).
_SAMPLE_OVER_TRUSTED_MS = 0.02


def _gaps(calls: Sequence[MeteredCall]) -> list[float]:
    return sorted(c.trusted_ms - c.sample_ms for c in calls)


def _quantile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Calibration:
    """The loop's own cost per call, measured with the reference model in the reference process:
    its gaps, their median and their spread. After a fresh calibration (the host's load changed),
    ``gaps`` is the upper envelope of both calibrations' (quantile by quantile, the higher) and
    ``least_clean_ms`` the lowest gap either saw: a candidate's least gap is held above the one,
    its floor below the other."""

    #: Ascending.
    gaps: tuple[float, ...]
    overhead_ms: float
    spread_ms: float
    calls: int
    least_clean_ms: float | None = None

    @property
    def clean_ms(self) -> float:
        """The lowest gap: a call that ran through."""
        return self.gaps[0]

    @property
    def lowest_clean_ms(self) -> float:
        return self.clean_ms if self.least_clean_ms is None else self.least_clean_ms

    def clean_for(self, calls: int) -> float:
        """The gap the luckiest of ``calls`` calls is held to: the calibration's at the quantile
        ``1 / (calls + 1)`` (where the least of that many draws lies), its lowest when it made no
        more calls than that. Forty calibration calls against a candidate's ten: the fourth lowest;
        on a quiet host they differ by microseconds, on a saturated one the least of ten calls
        rarely reaches the least of forty."""
        return self.gaps[min(len(self.gaps) - 1, len(self.gaps) // (calls + 1))]

    @classmethod
    def from_calls(cls, calls: Sequence[MeteredCall]) -> Calibration:
        gaps = _gaps(calls)
        if not gaps:
            raise ValueError("a calibration needs timed calls")
        centre = statistics.median(gaps)
        spread = 1.4826 * statistics.median(abs(g - centre) for g in gaps) if len(gaps) > 1 else 0.0
        return cls(gaps=tuple(gaps), overhead_ms=centre, spread_ms=spread, calls=len(gaps))

    def widest(self, other: Calibration) -> Calibration:
        """Both calibrations' window (conditions changed between them): the larger figures, each
        quantile's higher gap, and the lowest gap of either."""
        size = max(len(self.gaps), len(other.gaps))
        envelope = tuple(max(self.gaps[i * len(self.gaps) // size], other.gaps[i * len(other.gaps) // size])
                         for i in range(size))
        return Calibration(envelope, max(self.overhead_ms, other.overhead_ms), max(self.spread_ms, other.spread_ms),
                           self.calls + other.calls, least_clean_ms=min(self.lowest_clean_ms, other.lowest_clean_ms))


@dataclass(frozen=True)
class ClockCheck:
    """Whether the trusted clock explains the reported samples, with the figures for the verdict
    (the excess of the bound that broke, or the median's, against its allowance)."""

    agrees: bool
    #: Per call, beyond the calibrated gap: the excess of the first bound that broke, else the median's.
    excess_ms: float
    allowed_ms: float
    overhead_ms: float
    calls: int
    #: Calls whose sample exceeds their own round trip (a clock that cannot be right).
    impossible: int = 0
    #: The round trips were shorter than the harness's loop needs around a call.
    too_short: bool = False

    def detail(self) -> str:
        if self.too_short:
            return (f"per call, the round trips left {-1e3 * self.excess_ms:.0f} us less than the harness's loop "
                    f"needs around a call ({1e3 * self.overhead_ms:.0f} us: its inputs, flush and capture; allowed: "
                    f"{1e3 * self.allowed_ms:.0f} us): the loop that answered is not the harness's")
        if self.impossible:
            return (f"{self.impossible} of {self.calls} calls reported more time than their whole round trip "
                    "took by the trusted clock")
        return (f"per call, the trusted clock measured {1e3 * self.excess_ms:.0f} us more than the reported "
                f"samples beyond the loop's own cost of {1e3 * self.overhead_ms:.0f} us (allowed: "
                f"{1e3 * self.allowed_ms:.0f} us; {self.calls} calls)")


def check_clock(calls: Sequence[MeteredCall], calibration: Calibration) -> ClockCheck:
    """Bound the timed ``calls``' samples by the trusted clock (see the module's docstring)."""
    timed = [c for c in calls if not c.warmup]
    if not timed:
        return ClockCheck(False, 0.0, 0.0, calibration.overhead_ms, 0)
    impossible = sum(1 for c in timed if c.sample_ms > c.trusted_ms + _SAMPLE_OVER_TRUSTED_MS)
    gaps = _gaps(timed)
    median_sample = statistics.median(c.sample_ms for c in timed)
    held = max(ABSOLUTE_SLACK_MS, RELATIVE_SLACK * median_sample, LOOP_SLACK * calibration.overhead_ms)
    noisy = max(held, SPREAD_FACTOR * calibration.spread_ms)
    short = min(0.0, _quantile(gaps, FLOOR_QUANTILE) - calibration.lowest_clean_ms)
    least = gaps[0] - calibration.clean_for(len(gaps))
    median = statistics.median(gaps) - calibration.overhead_ms
    too_short = short < -noisy
    # The figures of the bound that broke, in this order; the median's when all held.
    excess, allowed = (short, noisy) if too_short else (least, held) if least > held else (median, noisy)
    return ClockCheck(agrees=not too_short and least <= held and median <= noisy and not impossible,
                      excess_ms=excess, allowed_ms=allowed,
                      overhead_ms=calibration.overhead_ms, calls=len(timed), impossible=impossible,
                      too_short=too_short)
