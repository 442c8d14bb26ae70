"""The reference sandbox's conversation: its start, its metered runs (baselines, calibration), the comparer.

The reference (`harness.sandboxed.roles.reference`) is trusted with the expected outputs and the baselines'
clocks, but runs the problem's code: the referee reads its replies through `vocabulary.wire.Reader`
too (`harness.reference.ReferenceClient`). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

from harness.protocol import Op, StartFailed, request_problem, request_trials, tagged
from harness.protocol.meter import CallInputs
from harness.seeds import TrialSpec
from problems.spec import Problem
from vocabulary.devices import DeviceSpecs
from vocabulary.evaluation import Target
from vocabulary.wire import JsonObject, JsonValue, Reader, WireError

__all__ = ["CompareItem", "CompareReply", "CompareRequest", "Compared", "DeviceMeasured", "MeterRequest",
           "ReferenceEnvironment", "ReferenceInfo", "ReferenceStart", "Timed"]


@dataclass(frozen=True, kw_only=True)
class ReferenceStart:
    """Build the problem's model with the job's weights and compute every trial's expected output."""

    op: ClassVar[Op] = Op.START
    problem: Problem
    target: Target
    trials: tuple[TrialSpec, ...]
    init_seed: int
    weights_seed: int
    #: The cpu target's memory budget for one trial (a larger problem is refused).
    budget_bytes: int
    #: The metered loop's extension (a copy in the sandbox's run directory), loaded first.
    meter_path: Path
    #: The device as this machine's record knows it (`harness.devicerecord`); None: measure it
    #: first, before the problem's code is loaded, and say so (`DeviceMeasured`) before the reply.
    specs: DeviceSpecs | None = None

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {
            "problem": self.problem.to_dict(), "target": self.target.value,
            "trials": [t.to_dict() for t in self.trials], "init_seed": self.init_seed,
            "weights_seed": self.weights_seed, "budget_bytes": self.budget_bytes,
            "meter_path": str(self.meter_path),
            "specs": self.specs.to_dict() if self.specs is not None else None})

    @classmethod
    def from_dict(cls, data: object) -> ReferenceStart:
        r = Reader(data, "the reference's start")
        return cls(problem=request_problem(r), target=Target(r.text("target")), trials=request_trials(r),
                   init_seed=r.integer("init_seed"), weights_seed=r.integer("weights_seed"),
                   budget_bytes=r.integer("budget_bytes"), meter_path=Path(r.text("meter_path")),
                   specs=DeviceSpecs.from_dict(r.data["specs"]) if r.has("specs") else None)



@dataclass(frozen=True, kw_only=True)
class DeviceMeasured:
    """The device as the reference sandbox measured it, sent before the problem's code is loaded
    (so that code cannot touch the figures), when the start carried no specs."""

    op: ClassVar[Op] = Op.DEVICE
    specs: DeviceSpecs
    #: The load average exceeded the usable cores while it measured.
    host_loaded: bool

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {"specs": self.specs.to_dict(), "host_loaded": self.host_loaded})

    @classmethod
    def from_dict(cls, data: object) -> DeviceMeasured:
        r = Reader(data, "the reference's device measurement")
        if r.data.get("op") != Op.DEVICE.value:
            raise WireError("the reference's device measurement is missing")
        return cls(specs=DeviceSpecs.from_dict(r.nested("specs").data), host_loaded=r.flag("host_loaded"))


@dataclass(frozen=True, kw_only=True)
class ReferenceEnvironment:
    """The versions and device the reference runs with (provenance; the baselines' cache key)."""

    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    python: str | None = None
    device: str | None = None
    driver: str | None = None
    #: CPU timings depend on it (a baseline cached with 8 threads is no baseline for 1).
    cpu_threads: int | None = None

    def to_dict(self) -> JsonObject:
        return {"torch": self.torch, "cuda": self.cuda, "cudnn": self.cudnn, "python": self.python,
                "device": self.device, "driver": self.driver, "cpu_threads": self.cpu_threads}

    @classmethod
    def from_dict(cls, data: object) -> ReferenceEnvironment:
        r = Reader(data, "the reference's environment")
        return cls(torch=r.optional_text("torch"), cuda=r.optional_text("cuda"), cudnn=r.optional_integer("cudnn"),
                   python=r.optional_text("python"), device=r.optional_text("device"),
                   driver=r.optional_text("driver"), cpu_threads=r.optional_integer("cpu_threads"))


@dataclass(frozen=True, kw_only=True)
class ReferenceInfo:
    """What the started reference knows: the device, the problem's FLOPs and minimum bytes, its
    roofline time and its environment (`harness.Referee.reference_info`)."""

    specs: DeviceSpecs
    flops: float
    min_bytes: float
    sol_ms: float | None
    output_dtype: str
    environment: ReferenceEnvironment

    def to_dict(self) -> JsonObject:
        return {"ok": True, "specs": self.specs.to_dict(), "flops": self.flops, "min_bytes": self.min_bytes,
                "sol_ms": self.sol_ms, "output_dtype": self.output_dtype, "environment": self.environment.to_dict()}

    @classmethod
    def read(cls, r: Reader) -> ReferenceInfo:
        return cls(specs=DeviceSpecs.from_dict(r.nested("specs").data), flops=r.number("flops"),
                   min_bytes=r.number("min_bytes"), sol_ms=r.optional_number("sol_ms"),
                   output_dtype=r.text("output_dtype"),
                   environment=ReferenceEnvironment.from_dict(r.nested("environment", optional=True).data))

    @classmethod
    def from_start_reply(cls, raw: JsonObject) -> ReferenceInfo | StartFailed:
        r = Reader(raw, "the reference's start reply")
        return cls.read(r) if r.flag("ok", False) else StartFailed.read(r)


class Timed(StrEnum):
    """What the reference times: its model as built (eager PyTorch) or under ``torch.compile``."""

    EAGER = "eager"
    COMPILED = "compiled"


@dataclass(frozen=True, kw_only=True)
class MeterRequest:
    """Time the reference (``timed``) in its metered loop over the trials ``sets`` (answered by
    `harness.protocol.meter.Metering`, then frames, then `MeterEnd`)."""

    op: ClassVar[Op] = Op.METER
    timed: Timed
    sets: tuple[int, ...]
    flush: bool

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {"timed": self.timed.value, "sets": list(self.sets), "flush": self.flush})

    @classmethod
    def from_dict(cls, data: object) -> MeterRequest:
        r = Reader(data, "the meter request")
        return cls(timed=Timed(r.text("timed")), sets=tuple(r.integers("sets")), flush=r.flag("flush"))


@dataclass(frozen=True, kw_only=True)
class CompareItem:
    """One output to compare: trial ``index``'s, or (``call``) that of an audited timed call on
    that trial's inputs. ``output`` is the candidate's description, checked by the comparer
    (`harness.sandboxed.transfer`): a file in its directory, or a sealed memfd sent with the request."""

    index: int
    output: JsonValue
    call: CallInputs | None = None

    def to_dict(self) -> JsonObject:
        item: JsonObject = {"index": self.index, "output": self.output}
        if self.call is not None:
            item["call"] = self.call.to_dict()
        return item

    @classmethod
    def from_dict(cls, data: object) -> CompareItem:
        r = Reader(data, "a compared output")
        return cls(index=r.integer("index"), output=r.json("output", optional=True),
                   call=CallInputs.from_dict(r.data["call"]) if r.has("call") else None)


@dataclass(frozen=True, kw_only=True)
class CompareRequest:
    """Compare outputs the candidate left in ``directory`` (or in the memfds sent with the request,
    in order) with the reference's, in the reference."""

    op: ClassVar[Op] = Op.COMPARE
    items: tuple[CompareItem, ...]
    directory: Path
    atol: float | None
    rtol: float | None

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {"items": [i.to_dict() for i in self.items], "directory": str(self.directory),
                                  "atol": self.atol, "rtol": self.rtol})

    @classmethod
    def from_dict(cls, data: object) -> CompareRequest:
        r = Reader(data, "the compare request")
        return cls(items=tuple(r.items_of("items", CompareItem.from_dict)), directory=Path(r.text("directory")),
                   atol=r.optional_number("atol"), rtol=r.optional_number("rtol"))


@dataclass(frozen=True, kw_only=True)
class Compared:
    """One comparison's result (errors are None where no number could be computed)."""

    passed: bool
    max_abs_err: float | None
    mean_abs_err: float | None
    mismatch_frac: float
    message: str

    def to_dict(self) -> JsonObject:
        return {"passed": self.passed, "max_abs_err": self.max_abs_err, "mean_abs_err": self.mean_abs_err,
                "mismatch_frac": self.mismatch_frac, "message": self.message}

    @classmethod
    def from_dict(cls, data: object) -> Compared:
        r = Reader(data, "a comparison")
        return cls(passed=r.flag("passed"), max_abs_err=r.optional_number("max_abs_err"),
                   mean_abs_err=r.optional_number("mean_abs_err"), mismatch_frac=r.number("mismatch_frac"),
                   message=r.text("message", ""))


@dataclass(frozen=True, kw_only=True)
class CompareReply:
    results: tuple[Compared, ...]

    def to_dict(self) -> JsonObject:
        return {"results": [c.to_dict() for c in self.results]}

    @classmethod
    def read(cls, r: Reader) -> CompareReply:
        return cls(results=tuple(r.items_of("results", Compared.from_dict)))
