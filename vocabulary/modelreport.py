"""The outcome of patching a model with kernels, as values (standard library only).

`ApplyReport` is what ``kernelloop model apply`` prints, what a model run stores and what the
dashboard shows: each region kept or left out (`RegionOutcome`: its share, its own speedups, the
referee's reason when it was left out), the referee's verdict on the whole patched model, and the
speedup the regions' shares and own speedups predict (Amdahl). `KernelChoice` is a region's kernel
going in. `harness.modelapply` makes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vocabulary.verdict import Status, Verdict
from vocabulary.wire import JsonObject, Reader

__all__ = ["ApplyReport", "KernelChoice", "RegionOutcome"]


@dataclass(frozen=True)
class KernelChoice:
    """A region's kernel: its source and, when known, its verdict on the region's own problem."""

    source: str
    verdict: Verdict | None = None


@dataclass(frozen=True)
class RegionOutcome:
    """One region in the patched model: kept or left out (and why), its share, its own speedups."""

    name: str
    share: float
    included: bool
    reason: str = ""
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "share": self.share, "included": self.included, "reason": self.reason,
                "speedup_vs_eager": self.speedup_vs_eager, "speedup_vs_compile": self.speedup_vs_compile}

    @classmethod
    def from_dict(cls, data: object) -> RegionOutcome:
        r = Reader(data, "a region's outcome")
        return cls(r.text("name"), r.number("share", 0.0), r.flag("included"), r.text("reason", ""),
                   r.optional_number("speedup_vs_eager"), r.optional_number("speedup_vs_compile"))


@dataclass(frozen=True)
class ApplyReport:
    """The whole-model verdict of a patch and what led to it."""

    model: str
    target: str
    regions: tuple[RegionOutcome, ...]
    #: The referee's verdict on the patched model with the regions kept (None: none was kept).
    verdict: Verdict | None
    #: Amdahl's prediction from the kept regions' own speedups vs eager and their shares.
    predicted_speedup: float | None
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.status is Status.PASS

    @property
    def included(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.regions if r.included)

    def to_dict(self) -> JsonObject:
        verdict = self.verdict
        return {
            "model": self.model, "target": self.target, "passed": self.passed, "included": list(self.included),
            "regions": [r.to_dict() for r in self.regions], "predicted_speedup": self.predicted_speedup,
            "speedup_vs_eager": verdict.speedup_vs_eager if verdict else None,
            "speedup_vs_compile": verdict.speedup_vs_compile if verdict else None,
            "patched_ms": verdict.timing.median_ms if verdict and verdict.timing else None,
            "eager_ms": verdict.baselines.eager.median_ms if verdict and verdict.baselines and verdict.baselines.eager
            else None,
            "compile_ms": verdict.baselines.torch_compile.median_ms
            if verdict and verdict.baselines and verdict.baselines.torch_compile else None,
            "verdict": verdict.to_dict() if verdict else None, "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: object) -> ApplyReport:
        r = Reader(data, "the apply report")
        raw = r.object("verdict") if r.has("verdict") else None
        return cls(r.text("model"), r.text("target"), tuple(r.items_of("regions", RegionOutcome.from_dict)),
                   Verdict.from_dict(raw) if raw else None, r.optional_number("predicted_speedup"),
                   tuple(r.texts("notes", optional=True)))
