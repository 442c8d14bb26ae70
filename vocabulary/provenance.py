"""Where a verdict's figures come from: `Provenance`, part of every verdict (docs/architecture.md, "The verdict").

The device, driver, torch/CUDA/cuDNN versions, harness version, tolerance, mode, policy, the
seeds' identity (never the seeds), the sandbox achieved and the host. Frozen values with
``to_dict()`` / ``from_dict()``: the JSON shape is the one stored with every attempt, every key
present (null where unknown); a verdict the referee never got far enough to describe has an
`empty` one, ``{}`` in JSON. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.wire import JsonObject, Reader

__all__ = ["DEFAULT_TOLERANCE_TEXT", "HARNESS_VERSION", "Provenance", "Tolerance"]

#: The referee's version: in every verdict's provenance and in the baselines cache's key.
HARNESS_VERSION = "0.2.0"

#: How a verdict names the evaluation contract's per-dtype default (docs/architecture.md; a problem
#: may override it).
DEFAULT_TOLERANCE_TEXT = "per dtype: fp32 1e-4, fp16/bf16 1e-2"


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    """The problem's ``atol``/``rtol`` (None: the per-dtype default)."""

    atol: float | None = None
    rtol: float | None = None
    default: str = DEFAULT_TOLERANCE_TEXT

    def to_dict(self) -> JsonObject:
        return {"atol": self.atol, "rtol": self.rtol, "default": self.default}

    @classmethod
    def from_dict(cls, data: object) -> Tolerance:
        r = Reader(data, "the tolerance")
        return cls(atol=r.optional_number("atol"), rtol=r.optional_number("rtol"),
                   default=r.text("default", DEFAULT_TOLERANCE_TEXT))


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """The facts behind one verdict; None where the referee did not learn one."""

    target: str | None = None
    device: str | None = None
    driver: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    python: str | None = None
    harness: str | None = None
    problem_sha256: str | None = None
    mode: str | None = None
    policy: str | None = None
    tolerance: Tolerance | None = None
    #: Correctness trials planned.
    trials: int | None = None
    #: The job secret's identity (`harness.seeds.secret_identity`), never the secret.
    seeds: str | None = None
    compile_mode: str | None = None
    #: ``metered`` (`harness.meter`: driven and bounded by the trusted side), ``metered, re-judged``
    #: (`harness.HarnessOptions.rejudge`); ``adaptive`` or ``hardened`` in verdicts of harness
    #: versions before it.
    timing_mode: str | None = None
    #: The namespaces the candidate's sandbox achieved.
    sandbox: tuple[str, ...] | None = None
    #: How outputs reached the comparer: ``file`` or ``cuda_ipc``.
    transport: str | None = None
    host: str | None = None
    pid: int | None = None

    @property
    def empty(self) -> bool:
        """Nothing recorded (the evaluation stopped before the referee knew its device)."""
        return self == Provenance()

    def to_dict(self) -> JsonObject:
        """Every key (null where unknown); ``{}`` for an `empty` one."""
        if self.empty:
            return {}
        return {
            "target": self.target,
            "device": self.device,
            "driver": self.driver,
            "torch": self.torch,
            "cuda": self.cuda,
            "cudnn": self.cudnn,
            "python": self.python,
            "harness": self.harness,
            "problem_sha256": self.problem_sha256,
            "mode": self.mode,
            "policy": self.policy,
            "tolerance": self.tolerance.to_dict() if self.tolerance is not None else None,
            "trials": self.trials,
            "seeds": self.seeds,
            "compile_mode": self.compile_mode,
            "timing_mode": self.timing_mode,
            "sandbox": list(self.sandbox) if self.sandbox is not None else None,
            "transport": self.transport,
            "host": self.host,
            "pid": self.pid,
        }

    @classmethod
    def from_dict(cls, data: object) -> Provenance:
        """From ``to_dict()``'s JSON; keys this version does not know are left out."""
        r = Reader(data, "the provenance")
        return cls(
            target=r.optional_text("target"), device=r.optional_text("device"), driver=r.optional_text("driver"),
            torch=r.optional_text("torch"), cuda=r.optional_text("cuda"), cudnn=r.optional_integer("cudnn"),
            python=r.optional_text("python"), harness=r.optional_text("harness"),
            problem_sha256=r.optional_text("problem_sha256"), mode=r.optional_text("mode"),
            policy=r.optional_text("policy"),
            tolerance=Tolerance.from_dict(r.data["tolerance"]) if r.has("tolerance") else None,
            trials=r.optional_integer("trials"), seeds=r.optional_text("seeds"),
            compile_mode=r.optional_text("compile_mode"), timing_mode=r.optional_text("timing_mode"),
            sandbox=tuple(r.texts("sandbox")) if r.has("sandbox") else None, transport=r.optional_text("transport"),
            host=r.optional_text("host"), pid=r.optional_integer("pid"),
        )
