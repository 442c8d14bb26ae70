"""A model's profile as values: its regions, their shares of its time, and what they predict.

`ModelProfile` is what ``kernelloop model profile`` shows, what ``extract`` writes as
``model.json``, what a model run stores and what ``apply`` patches by: each `Region` (one problem,
possibly several `RegionInstance`\\ s of it in the model, such as the same block in every layer)
with its operations, boundary shapes and dtypes, its share of the model's time and what
``torch.compile`` gains on it. `select_regions` is the default selection (the largest regions
until a share of the time is covered); `amdahl` what per-region speedups predict for the model.

Shares are of the time the profiler attributes to regions (they sum to 1); the model's own eager
time, measured without the profiler, is kept beside them (``model_ms``), and the part of it no
region accounts for (Python and dispatch overhead, glue) is ``unattributed_fraction``.

Standard library only: the harness's driver, the store, the API and the CLI all read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from vocabulary.wire import JsonObject, Reader, WireError

__all__ = ["DEFAULT_COVERAGE", "MIN_REGION_WEIGHT", "Boundary", "CaptureReport", "ModelProfile", "Region",
           "RegionInstance", "amdahl", "select_regions", "share_weights"]

#: The default selection covers this share of the model's time (the issue's "80 %").
DEFAULT_COVERAGE = 0.8
#: A selected region's budget weight is at least this fraction of the selection's mean: a small
#: region still gets enough to compile, check, time and submit a kernel.
MIN_REGION_WEIGHT = 0.5


@dataclass(frozen=True)
class Boundary:
    """A tensor at a region's boundary: its shape as the problem writes it (``(batch_size, 64)``),
    its values at the full sizes and at the CPU sizes, and its dtype."""

    shape: str
    full: tuple[int, ...]
    cpu: tuple[int, ...]
    dtype: str

    def to_dict(self) -> JsonObject:
        return {"shape": self.shape, "full": list(self.full), "cpu": list(self.cpu), "dtype": self.dtype}

    @classmethod
    def from_dict(cls, data: object) -> Boundary:
        r = Reader(data, "a boundary tensor")
        return cls(r.text("shape"), tuple(r.integers("full")), tuple(r.integers("cpu")), r.text("dtype"))


@dataclass(frozen=True)
class RegionInstance:
    """One place of a region in the model: the captured part it lies in (``unit``: a submodule's
    path, ``""`` for the whole model), its graph nodes and what they call (checked when patching),
    the problem's parameter names in order and the model's tensors they are (paths in the unit),
    and the model's modules it covers."""

    unit: str
    nodes: tuple[str, ...]
    targets: tuple[str, ...]
    params: tuple[str, ...]
    param_paths: tuple[str, ...]
    modules: tuple[str, ...]

    def to_dict(self) -> JsonObject:
        return {"unit": self.unit, "nodes": list(self.nodes), "targets": list(self.targets),
                "params": list(self.params), "param_paths": list(self.param_paths), "modules": list(self.modules)}

    @classmethod
    def from_dict(cls, data: object) -> RegionInstance:
        r = Reader(data, "a region instance")
        instance = cls(r.text("unit", ""), tuple(r.texts("nodes")), tuple(r.texts("targets")), tuple(r.texts("params")),
                       tuple(r.texts("param_paths")), tuple(r.texts("modules", optional=True)))
        if len(instance.nodes) != len(instance.targets) or len(instance.params) != len(instance.param_paths):
            raise WireError("a region instance's nodes and targets, or params and paths, differ in number")
        return instance


def _boundaries(r: Reader, key: str) -> tuple[Boundary, ...]:
    return tuple(r.items_of(key, Boundary.from_dict, optional=True))


@dataclass(frozen=True)
class Region:
    """One region problem of the model and where it occurs.

    ``time_ms`` is what the profiler attributed to all its instances per model call; ``share`` that
    time over all regions' (summing to 1 over the model's regions); ``eager_ms`` and ``compile_ms``
    one instance alone, eager and under ``torch.compile``.
    """

    name: str
    kind: str
    ops: tuple[str, ...]
    lone_vendor_call: bool
    instances: tuple[RegionInstance, ...]
    inputs: tuple[Boundary, ...]
    outputs: tuple[Boundary, ...]
    params: tuple[Boundary, ...]
    source: str
    sizes: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    random: bool = False
    time_ms: float = 0.0
    share: float = 0.0
    eager_ms: float | None = None
    compile_ms: float | None = None
    compile_note: str = ""

    @property
    def problem_file(self) -> str:
        return f"{self.name}.py"

    @property
    def compile_gain(self) -> float | None:
        """Eager over ``torch.compile`` for one instance (above 1: compile is faster)."""
        if self.eager_ms and self.compile_ms:
            return self.eager_ms / self.compile_ms
        return None

    @property
    def modules(self) -> tuple[str, ...]:
        seen: list[str] = []
        for instance in self.instances:
            seen += [m for m in instance.modules if m not in seen]
        return tuple(seen)

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name, "problem": self.problem_file, "kind": self.kind, "ops": list(self.ops),
            "lone_vendor_call": self.lone_vendor_call, "instances": [i.to_dict() for i in self.instances],
            "inputs": [b.to_dict() for b in self.inputs], "outputs": [b.to_dict() for b in self.outputs],
            "params": [b.to_dict() for b in self.params], "source": self.source,
            "sizes": {k: list(v) for k, v in self.sizes.items()}, "random": self.random, "time_ms": self.time_ms,
            "share": self.share, "eager_ms": self.eager_ms, "compile_ms": self.compile_ms,
            "compile_gain": self.compile_gain, "compile_note": self.compile_note,
        }

    @classmethod
    def from_dict(cls, data: object) -> Region:
        r = Reader(data, "a region")
        sizes = {}
        for name, pair in r.object("sizes").items() if r.has("sizes") else ():
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, int) for v in pair)):
                raise WireError(f"region size {name!r} is not a [full, cpu] pair")
            sizes[name] = (int(pair[0]), int(pair[1]))
        return cls(
            name=r.text("name"), kind=r.text("kind"), ops=tuple(r.texts("ops")),
            lone_vendor_call=r.flag("lone_vendor_call", False),
            instances=tuple(r.items_of("instances", RegionInstance.from_dict)), inputs=_boundaries(r, "inputs"),
            outputs=_boundaries(r, "outputs"), params=_boundaries(r, "params"), source=r.text("source", ""),
            sizes=sizes, random=r.flag("random", False), time_ms=r.number("time_ms", 0.0),
            share=r.number("share", 0.0), eager_ms=r.optional_number("eager_ms"),
            compile_ms=r.optional_number("compile_ms"), compile_note=r.text("compile_note", ""))


@dataclass(frozen=True)
class CaptureReport:
    """How the model was captured: the method, whether sizes stayed dynamic, the captured parts
    (``""``: the whole model), the parts that could not be (path → why) and notes."""

    method: str
    dynamic: bool
    units: tuple[str, ...]
    failures: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def whole(self) -> bool:
        return self.units == ("",)

    def to_dict(self) -> JsonObject:
        return {"method": self.method, "dynamic": self.dynamic, "units": list(self.units),
                "failures": [{"part": p or "(the whole model)", "path": p, "reason": why} for p, why in self.failures],
                "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: object) -> CaptureReport:
        r = Reader(data, "the capture report")

        def failure(item: object) -> tuple[str, str]:
            f = Reader(item, "a capture failure")
            return f.text("path", ""), f.text("reason", "")

        return cls(r.text("method"), r.flag("dynamic", False), tuple(r.texts("units")),
                   tuple(r.items_of("failures", failure, optional=True)), tuple(r.texts("notes", optional=True)))


@dataclass(frozen=True)
class ModelProfile:
    """The profile of one model on one target (see the module's docstring)."""

    model: str
    target: str
    mode: str
    device: str
    model_ms: float
    compile_ms: float | None
    attributed_ms: float
    regions: tuple[Region, ...]
    capture: CaptureReport
    #: The model with every region run as its extracted problem gave the model's own output.
    faithful: bool = True
    faithful_error: float | None = None
    notes: tuple[str, ...] = ()

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(f"no region {name!r}: the model's regions are {', '.join(r.name for r in self.regions)}")

    @property
    def unattributed_fraction(self) -> float:
        """The part of the model's eager time no region accounts for (0 when the profiler's
        attributed time exceeds it: its own overhead inflates small ops)."""
        if self.model_ms <= 0:
            return 0.0
        return max(0.0, 1.0 - self.attributed_ms / self.model_ms)

    def coverage(self, names: Iterable[str]) -> float:
        wanted = set(names)
        return sum(r.share for r in self.regions if r.name in wanted)

    def with_regions(self, regions: Sequence[Region]) -> ModelProfile:
        return replace(self, regions=tuple(regions))

    def to_dict(self) -> JsonObject:
        return {
            "model": self.model, "target": self.target, "mode": self.mode, "device": self.device,
            "model_ms": self.model_ms, "compile_ms": self.compile_ms, "attributed_ms": self.attributed_ms,
            "unattributed_fraction": self.unattributed_fraction, "regions": [r.to_dict() for r in self.regions],
            "capture": self.capture.to_dict(), "faithful": self.faithful, "faithful_error": self.faithful_error,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: object) -> ModelProfile:
        r = Reader(data, "the model's profile")
        return cls(
            model=r.text("model"), target=r.text("target"), mode=r.text("mode"), device=r.text("device", ""),
            model_ms=r.number("model_ms"), compile_ms=r.optional_number("compile_ms"),
            attributed_ms=r.number("attributed_ms", 0.0), regions=tuple(r.items_of("regions", Region.from_dict)),
            capture=CaptureReport.from_dict(r.nested("capture").data), faithful=r.flag("faithful", True),
            faithful_error=r.optional_number("faithful_error"), notes=tuple(r.texts("notes", optional=True)))


def select_regions(profile: ModelProfile, *, names: Sequence[str] | None = None, top: int | None = None,
                   coverage: float = DEFAULT_COVERAGE) -> list[Region]:
    """The regions to optimise: ``names`` if given (each must exist), else the ``top`` largest,
    else the largest until ``coverage`` of the model's time is covered. Largest first.

    Raises:
        KeyError: a name is not one of the model's regions.
    """
    ordered = sorted(profile.regions, key=lambda r: r.share, reverse=True)
    if names:
        return sorted((profile.region(n) for n in dict.fromkeys(names)), key=lambda r: r.share, reverse=True)
    if top is not None:
        return ordered[: max(0, top)]
    chosen: list[Region] = []
    covered = 0.0
    for region in ordered:
        if covered >= coverage - 1e-9:
            break
        chosen.append(region)
        covered += region.share
    return chosen


def amdahl(profile: ModelProfile, speedups: Mapping[str, float]) -> float:
    """The whole model's speedup that per-region speedups predict (Amdahl's law): each region's
    share of the model's time (its share of the attributed time, scaled by the attributed
    fraction) divided by its speedup, the rest unchanged."""
    attributed = 1.0 - profile.unattributed_fraction
    remaining = 1.0
    for region in profile.regions:
        speedup = speedups.get(region.name)
        if speedup and speedup > 0:
            fraction = region.share * attributed
            remaining += fraction / speedup - fraction
    return 1.0 / remaining if remaining > 0 else float("inf")


def share_weights(shares: Mapping[str, float]) -> dict[str, float]:
    """How a model run's budgets are split among its regions: by share, each at least
    `MIN_REGION_WEIGHT` of the mean; the weights sum to 1."""
    if not shares:
        return {}
    total = sum(max(0.0, s) for s in shares.values())
    if total <= 0:
        return {name: 1.0 / len(shares) for name in shares}
    floor = MIN_REGION_WEIGHT / len(shares)
    raw = {name: max(max(0.0, s) / total, floor) for name, s in shares.items()}
    norm = sum(raw.values())
    return {name: w / norm for name, w in raw.items()}
