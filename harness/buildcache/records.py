"""What the build cache records of each extension it builds or reuses, as the build goes.

A `BuildRecord` is filled in while one ``load_inline``/``load`` runs (its header's part, its
translation units, its kernels), so it is mutable; it leaves a sandbox as JSON (a builder's answer,
`harness.protocol.build.BuildAnswer`) and becomes the verdict's frozen `ExtensionBuild`
(`to_extension`). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from vocabulary.builds import BuildPhase, ExtensionBuild, HeaderUse, KernelInfo, UnitBuild
from vocabulary.wire import JsonObject, Reader

__all__ = ["BuildAnswer", "BuildRecord", "UnitRecord"]


@dataclass(kw_only=True)
class UnitRecord:
    """One translation unit of a builder's build: its object's key, and what became of it."""

    source: str
    #: The object file ninja builds for it (relative to the build directory).
    object_file: str
    key: str
    #: The ninja rule: ``compile`` (C++) or ``cuda_compile``.
    rule: str
    reused: bool = False
    torch_headers: bool = False
    flags: tuple[str, ...] = ()
    kernels: tuple[KernelInfo, ...] = ()
    first_seconds: float | None = None
    seconds: float | None = None
    kept: str | None = None

    def to_unit(self) -> UnitBuild:
        return UnitBuild(source=self.source, key=self.key, reused=self.reused, seconds=self.seconds,
                         torch_headers=self.torch_headers, kept=self.kept, first_seconds=self.first_seconds)

    def to_dict(self) -> JsonObject:
        unit: JsonObject = {"source": self.source, "object": self.object_file, "key": self.key, "rule": self.rule,
                            "reused": self.reused, "torch_headers": self.torch_headers, "flags": list(self.flags),
                            "kernels": [k.to_dict() for k in self.kernels]}
        for name, value in (("first_seconds", self.first_seconds), ("seconds", self.seconds), ("kept", self.kept)):
            if value is not None:
                unit[name] = value
        return unit

    @classmethod
    def from_dict(cls, data: object) -> UnitRecord:
        r = Reader(data, "a translation unit's record")
        return cls(source=r.text("source"), object_file=r.text("object"), key=r.text("key"), rule=r.text("rule"),
                   reused=r.flag("reused", False), torch_headers=r.flag("torch_headers", False),
                   flags=tuple(r.texts("flags", optional=True)),
                   kernels=tuple(r.items_of("kernels", KernelInfo.from_dict, optional=True)),
                   first_seconds=r.optional_number("first_seconds"), seconds=r.optional_number("seconds"),
                   kept=r.optional_text("kept"))


@dataclass(kw_only=True)
class BuildRecord:
    """One extension requested from the cache: its name and key, whether it was ``cached``, the
    seconds its build took, and what the build found on the way."""

    name: str
    key: str
    cached: bool
    seconds: float = 0.0
    #: ``builder`` or ``stage`` (a compile sandbox that may delegate): where the build is. The value
    #: ``stage`` keeps the sandbox's old name: stored verdicts hold it.
    via: str | None = None
    builder_refusal: str | None = None
    pch: HeaderUse | None = None
    #: A builder's translation units (None: the build was not split into reusable objects).
    objects: list[UnitRecord] | None = None
    kernels: tuple[KernelInfo, ...] | None = None
    #: The binding's C++ flags as the candidate wrote them (the header's key); never sent.
    extra_cflags: tuple[str, ...] = ()
    #: (A candidate sandbox's) where the candidate built it lazily; never sent.
    lazy: BuildPhase | None = None

    def to_extension(self) -> ExtensionBuild:
        return ExtensionBuild(name=self.name, key=self.key, cached=self.cached, seconds=self.seconds, pch=self.pch,
                              via=self.via, builder_refusal=self.builder_refusal,
                              units=tuple(u.to_unit() for u in self.objects) if self.objects is not None else None,
                              lazy=self.lazy)

    def to_dict(self) -> JsonObject:
        record: JsonObject = {"name": self.name, "key": self.key, "cached": self.cached, "seconds": self.seconds}
        if self.via is not None:
            record["via"] = self.via
        if self.builder_refusal is not None:
            record["builder_refusal"] = self.builder_refusal
        if self.pch is not None:
            record["pch"] = self.pch.to_dict()
        if self.objects is not None:
            record["objects"] = [u.to_dict() for u in self.objects]
        if self.kernels is not None:
            record["kernels"] = [k.to_dict() for k in self.kernels]
        return record

    @classmethod
    def from_dict(cls, data: object) -> BuildRecord:
        r = Reader(data, "a build record")
        return cls(name=r.text("name"), key=r.text("key"), cached=r.flag("cached", False),
                   seconds=r.number("seconds", 0.0), via=r.optional_text("via"),
                   builder_refusal=r.optional_text("builder_refusal"),
                   pch=HeaderUse.from_dict(r.data["pch"]) if r.has("pch") else None,
                   objects=r.items_of("objects", UnitRecord.from_dict) if r.has("objects") else None,
                   kernels=tuple(r.items_of("kernels", KernelInfo.from_dict)) if r.has("kernels") else None)


@dataclass(frozen=True, kw_only=True)
class BuildAnswer:
    """The trusted side's answer to a delegated build: ``ok`` with the ``key`` it built under
    (computed by the builder, never taken from the asking sandbox) and its ``record``, or the
    ``log`` of what failed."""

    ok: bool
    log: str = ""
    key: str | None = None
    record: BuildRecord | None = None
    seconds: float = 0.0

    def to_dict(self) -> JsonObject:
        answer: JsonObject = {"ok": self.ok, "log": self.log, "seconds": self.seconds}
        if self.key is not None:
            answer["key"] = self.key
        if self.record is not None:
            answer["record"] = self.record.to_dict()
        return answer

    @classmethod
    def from_dict(cls, data: object) -> BuildAnswer:
        r = Reader(data, "a build's answer")
        return cls(ok=r.flag("ok", False), log=r.text("log", ""), key=r.optional_text("key"),
                   record=BuildRecord.from_dict(r.data["record"]) if r.has("record") else None,
                   seconds=r.number("seconds", 0.0))
