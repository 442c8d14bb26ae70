"""How a callable was timed: the raw samples of one timed callable (`Timing`), the trusted clock's
bound on a candidate's (`ClockBound`), and the reference's baselines (`Baselines`).

Standard library only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from vocabulary.wire import JsonObject, Reader

__all__ = ["HOST_LOADED_WARNING", "Baselines", "ClockBound", "Timing"]


#: How a CPU timing's warning starts when the host was loaded while it ran (`harness.meter.noise`):
#: other work on the cores only ever slows calls down, so its figures may be inflated.
HOST_LOADED_WARNING = "noisy: the host was loaded"


@dataclass(frozen=True, kw_only=True)
class ClockBound:
    """How the trusted clock bounded a candidate's samples (`harness.meter.clock`): per call, the
    loop's own cost on this host, what the candidate's calls took beyond it (``excess_ms``, median)
    and what was allowed; and how many of its calls were audited."""

    overhead_ms: float
    excess_ms: float
    allowed_ms: float
    calls: int
    audits: int

    def to_dict(self) -> JsonObject:
        return {"overhead_ms": self.overhead_ms, "excess_ms": self.excess_ms, "allowed_ms": self.allowed_ms,
                "calls": self.calls, "audits": self.audits}

    @classmethod
    def from_dict(cls, data: object) -> ClockBound:
        r = Reader(data, "the trusted clock's bound")
        return cls(overhead_ms=r.number("overhead_ms"), excess_ms=r.number("excess_ms"),
                   allowed_ms=r.number("allowed_ms"), calls=r.integer("calls"), audits=r.integer("audits"))


@dataclass(frozen=True)
class Timing:
    """Raw samples of one timed callable; statistics are derived, never stored twice."""

    samples_ms: tuple[float, ...]
    #: Where the samples come from: "cuda_events" or "monotonic" (CLOCK_MONOTONIC around the call,
    #: in the metered loop); "perf_counter" in verdicts of harness versions before the loop.
    clock: str = "perf_counter"
    #: Noise and fidelity warnings travel with the result.
    warnings: tuple[str, ...] = ()
    #: The trusted clock's bound on a candidate's samples (None for baselines: ours).
    bound: ClockBound | None = None

    @property
    def n(self) -> int:
        return len(self.samples_ms)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.samples_ms)

    @property
    def iqr_ms(self) -> float:
        if self.n < 4:
            return max(self.samples_ms) - min(self.samples_ms)
        q1, _, q3 = statistics.quantiles(self.samples_ms, n=4)
        return q3 - q1

    @property
    def host_loaded(self) -> bool:
        """Taken while the host was loaded (its figures may be inflated)."""
        return any(w.startswith(HOST_LOADED_WARNING) for w in self.warnings)

    @property
    def spread_noisy(self) -> bool:
        """Its own samples are noisy (a wide spread or standard error), whatever the host's load."""
        return any(w.startswith("noisy") and not w.startswith(HOST_LOADED_WARNING) for w in self.warnings)

    @property
    def rel_stderr(self) -> float:
        """Standard error of the mean over the mean (0 when fewer than two samples)."""
        if self.n < 2 or self.mean_ms <= 0:
            return 0.0
        return statistics.stdev(self.samples_ms) / math.sqrt(self.n) / self.mean_ms

    def to_dict(self) -> JsonObject:
        return {
            "median_ms": self.median_ms,
            "iqr_ms": self.iqr_ms,
            "mean_ms": self.mean_ms,
            "n": self.n,
            "clock": self.clock,
            "warnings": list(self.warnings),
            "samples_ms": list(self.samples_ms),
            "trusted_clock": self.bound.to_dict() if self.bound is not None else None,
        }

    @classmethod
    def from_dict(cls, data: object) -> Timing:
        r = Reader(data, "a timing")
        return cls(samples_ms=tuple(r.numbers("samples_ms")), clock=r.text("clock", "perf_counter"),
                   warnings=tuple(r.texts("warnings", optional=True)),
                   bound=ClockBound.from_dict(r.data["trusted_clock"]) if r.has("trusted_clock") else None)

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float], *, clock: str, warnings: Sequence[str] = ()) -> Timing:
        return cls(samples_ms=tuple(float(s) for s in samples_ms), clock=clock, warnings=tuple(warnings))


@dataclass(frozen=True)
class Baselines:
    """The reference timed in the trusted process: eager PyTorch and ``torch.compile``."""

    eager: Timing | None
    torch_compile: Timing | None
    #: Why a baseline is missing (torch.compile failed, or was switched off), if it is.
    notes: tuple[str, ...] = ()

    @property
    def eager_ms(self) -> float | None:
        return self.eager.median_ms if self.eager else None

    @property
    def torch_compile_ms(self) -> float | None:
        return self.torch_compile.median_ms if self.torch_compile else None

    def to_dict(self) -> JsonObject:
        return {
            "eager_ms": self.eager_ms,
            "torch_compile_ms": self.torch_compile_ms,
            "eager": self.eager.to_dict() if self.eager else None,
            "torch_compile": self.torch_compile.to_dict() if self.torch_compile else None,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: object) -> Baselines:
        r = Reader(data, "the baselines")
        # Verdicts stored before 0.3 named the torch.compile baseline "compile" (also the build's
        # name at the verdict's top level); read them as they are, write the one name.
        torch_compile = "torch_compile" if r.has("torch_compile") else "compile"
        return cls(
            eager=Timing.from_dict(r.data["eager"]) if r.has("eager") else None,
            torch_compile=Timing.from_dict(r.data[torch_compile]) if r.has(torch_compile) else None,
            notes=tuple(r.texts("notes", optional=True)),
        )
