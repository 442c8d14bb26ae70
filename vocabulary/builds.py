"""What a compile built: `CompileResult` and the facts of each extension, header and kernel.

The verdict's compile section (`Verdict.compile`). Frozen values with ``to_dict()`` /
``from_dict()``; a fact a build did not reach is None and left out of the JSON, as the compile
sandbox leaves it out. The compile sandbox reports them, and it runs the candidate's import-time code:
its reply is read through `vocabulary.wire.Reader` where it enters (`harness.protocol`), so a
malformed one is a `WireError`. The build cache (`harness.buildcache`) records them as it builds.
Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from vocabulary.wire import JsonObject, JsonValue, Reader, WireError

__all__ = ["BuildFailure", "BuildPhase", "CompileResult", "ExtensionBuild", "HeaderUse", "KernelInfo", "UnitBuild"]


class BuildPhase(StrEnum):
    """Where a candidate built an extension that its compile sandbox did not (a *lazy* build, made in
    the candidate sandbox through the same trusted builder): its module's import there (a build
    gated on something only that sandbox has, such as ``torch.cuda.is_available()``), ``ModelNew``'s
    ``__init__``, or a forward."""

    IMPORT = "import"
    INIT = "__init__"
    FORWARD = "forward"


def _present(pairs: dict[str, JsonValue]) -> JsonObject:
    """The pairs whose value is not None (a fact the build did not reach is left out)."""
    return {key: value for key, value in pairs.items() if value is not None}


@dataclass(frozen=True, kw_only=True)
class KernelInfo:
    """One kernel's ``ptxas -v`` figures (registers, shared memory, stack, spills)."""

    kernel: str
    arch: str | None = None
    registers: int | None = None
    smem_bytes: int | None = None
    stack_bytes: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None

    def to_dict(self) -> JsonObject:
        return _present({"kernel": self.kernel, "arch": self.arch, "registers": self.registers,
                         "smem_bytes": self.smem_bytes, "stack_bytes": self.stack_bytes,
                         "spill_stores": self.spill_stores, "spill_loads": self.spill_loads})

    @classmethod
    def from_dict(cls, data: object) -> KernelInfo:
        r = Reader(data, "a kernel's figures")
        return cls(kernel=r.text("kernel"), arch=r.optional_text("arch"), registers=r.optional_integer("registers"),
                   smem_bytes=r.optional_integer("smem_bytes"), stack_bytes=r.optional_integer("stack_bytes"),
                   spill_stores=r.optional_integer("spill_stores"), spill_loads=r.optional_integer("spill_loads"))


@dataclass(frozen=True, kw_only=True)
class HeaderUse:
    """The precompiled torch header's part in a build: ``status`` (``used``, ``built``,
    ``missing``, ``rejected``, ``off``, ``no_cpp``, ``not_gcc``, ``full``, ``failed``,
    ``invalid``, ``unsupported``, ``not_first_include``) and what goes with it."""

    status: str
    key: str | None = None
    seconds: float | None = None
    #: The binding's flags as the header is keyed by them (normalised).
    flags: tuple[str, ...] | None = None
    reason: str | None = None
    error: str | None = None

    def to_dict(self) -> JsonObject:
        return _present({"key": self.key, "status": self.status, "seconds": self.seconds,
                         "flags": list(self.flags) if self.flags is not None else None,
                         "reason": self.reason, "error": self.error})

    @classmethod
    def from_dict(cls, data: object) -> HeaderUse:
        r = Reader(data, "a build's header")
        return cls(status=r.text("status"), key=r.optional_text("key"), seconds=r.optional_number("seconds"),
                   flags=tuple(r.texts("flags")) if r.has("flags") else None, reason=r.optional_text("reason"),
                   error=r.optional_text("error"))


@dataclass(frozen=True, kw_only=True)
class UnitBuild:
    """One translation unit of a trusted build: compiled (``seconds``) or ``reused`` from an
    earlier build, and whether its object was ``kept`` for later ones (or why not)."""

    source: str
    key: str
    reused: bool
    seconds: float | None = None
    #: Whether it includes torch's headers (the heavy part of a compile).
    torch_headers: bool | None = None
    kept: str | None = None
    #: What it cost when it was first compiled (a reused unit).
    first_seconds: float | None = None

    def to_dict(self) -> JsonObject:
        return _present({"source": self.source, "key": self.key, "reused": self.reused, "seconds": self.seconds,
                         "torch_headers": self.torch_headers, "kept": self.kept,
                         "first_seconds": self.first_seconds})

    @classmethod
    def from_dict(cls, data: object) -> UnitBuild:
        r = Reader(data, "a translation unit")
        return cls(source=r.text("source"), key=r.text("key"), reused=r.flag("reused"),
                   seconds=r.optional_number("seconds"),
                   torch_headers=r.flag("torch_headers") if r.has("torch_headers") else None,
                   kept=r.optional_text("kept"), first_seconds=r.optional_number("first_seconds"))


@dataclass(frozen=True, kw_only=True)
class ExtensionBuild:
    """One extension a candidate built or reused, by name and content key."""

    name: str
    key: str
    #: Reused from the cache (no compiler ran for it in this attempt).
    cached: bool
    seconds: float = 0.0
    pch: HeaderUse | None = None
    #: Where the build is: ``builder`` (the trusted builder's) or ``stage`` (the compile sandbox's; the
    #: value keeps the sandbox's old name: stored verdicts hold it).
    via: str | None = None
    #: Why the trusted builder could not build it (it was built in the compile sandbox).
    builder_refusal: str | None = None
    units: tuple[UnitBuild, ...] | None = None
    #: Built lazily, in the candidate sandbox (None: at import, in the compile sandbox).
    lazy: BuildPhase | None = None

    @property
    def by_builder(self) -> bool:
        return self.via == "builder"

    def to_dict(self) -> JsonObject:
        return _present({"name": self.name, "key": self.key, "cached": self.cached, "seconds": self.seconds,
                         "pch": self.pch.to_dict() if self.pch is not None else None, "via": self.via,
                         "builder_refusal": self.builder_refusal,
                         "units": [u.to_dict() for u in self.units] if self.units is not None else None,
                         "lazy": self.lazy.value if self.lazy is not None else None})

    @classmethod
    def from_dict(cls, data: object) -> ExtensionBuild:
        r = Reader(data, "an extension's build")
        lazy = r.optional_text("lazy")
        return cls(name=r.text("name"), key=r.text("key"), cached=r.flag("cached"),
                   seconds=r.number("seconds", 0.0),
                   pch=HeaderUse.from_dict(r.data["pch"]) if r.has("pch") else None,
                   via=r.optional_text("via"), builder_refusal=r.optional_text("builder_refusal"),
                   units=tuple(r.items_of("units", UnitBuild.from_dict)) if r.has("units") else None,
                   lazy=_phase(lazy, r))


def _phase(value: str | None, r: Reader) -> BuildPhase | None:
    if value is None:
        return None
    try:
        return BuildPhase(value)
    except ValueError:
        raise WireError(f"{r.what}: 'lazy' is not a build phase") from None


@dataclass(frozen=True, kw_only=True)
class BuildFailure:
    """A ``load_inline`` (or ``load``) that raised while the candidate went on: it caught the
    error (most LLM-written kernels fall back to PyTorch when their build fails), so whatever
    failed later, this is the true cause. ``errors``: the compiler's, trimmed
    (`harness.buildcache.trim_compiler_errors`); ``lazy``: where, if not at import in the compile stage."""

    name: str
    errors: str
    lazy: BuildPhase | None = None

    def to_dict(self) -> JsonObject:
        return _present({"name": self.name, "errors": self.errors,
                         "lazy": self.lazy.value if self.lazy is not None else None})

    @classmethod
    def from_dict(cls, data: object) -> BuildFailure:
        r = Reader(data, "a failed build")
        return cls(name=r.text("name"), errors=r.text("errors", ""), lazy=_phase(r.optional_text("lazy"), r))


@dataclass(frozen=True)
class CompileResult:
    """What the compile sandbox learnt: per-extension build facts and trimmed errors."""

    ok: bool
    seconds: float
    extensions: tuple[ExtensionBuild, ...] = ()
    kernels: tuple[KernelInfo, ...] = ()
    #: The first compiler errors with file:line and context, trimmed.
    errors: str = ""
    #: Builds that raised while the candidate went on (it caught the error), lazy ones included.
    swallowed: tuple[BuildFailure, ...] = ()

    def to_dict(self) -> JsonObject:
        return {
            "ok": self.ok,
            "seconds": self.seconds,
            "extensions": [e.to_dict() for e in self.extensions],
            "kernels": [k.to_dict() for k in self.kernels],
            "errors": self.errors,
            "swallowed": [f.to_dict() for f in self.swallowed],
        }

    @classmethod
    def from_dict(cls, data: object) -> CompileResult:
        r = Reader(data, "the compile section")
        return cls(ok=r.flag("ok"), seconds=r.number("seconds"),
                   extensions=tuple(r.items_of("extensions", ExtensionBuild.from_dict, optional=True)),
                   kernels=tuple(r.items_of("kernels", KernelInfo.from_dict, optional=True)),
                   errors=r.text("errors", ""),
                   swallowed=tuple(r.items_of("swallowed", BuildFailure.from_dict, optional=True)))
