"""The compile and builder sandboxes' conversation: a compile, its delegated builds, a builder's answers.

A compile sandbox (`harness.sandboxed.roles.compile`) imports the candidate with no GPU visible: its reply
comes from a process running the candidate's import-time code, so the referee reads it through
`vocabulary.wire.Reader` where it enters (`harness.compiler.CompileClient`); a malformed one fails
the compile. A ``load_inline`` of plain data may be *delegated*: the sandbox sends a `Delegation`,
the referee has a builder sandbox (trusted code only) build it and answers with its `BuildAnswer`
(`harness.buildcache.records`). A trusted warm-up request (no candidate) builds the precompiled
torch header of each `HeaderFlags` instead. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import ClassVar

from harness.protocol import Op, tagged
from vocabulary.builds import BuildFailure, BuildPhase, ExtensionBuild, KernelInfo
from vocabulary.wire import JsonObject, Reader

__all__ = ["BuilderBuild", "CompileReply", "CompileRequest", "Delegation", "HeaderFlags", "HeaderMode"]


class HeaderMode(StrEnum):
    """What a sandbox may do with precompiled torch headers."""

    #: None at all.
    OFF = "off"
    #: Only those already published (a candidate's sandbox: its code could plant one).
    USE = "use"
    #: Build the missing ones too (a trusted warm-up sandbox only).
    BUILD = "build"


@dataclass(frozen=True, kw_only=True)
class HeaderFlags:
    """The binding flags a precompiled header is built for (``cuda``: with the CUDA include)."""

    extra_cflags: tuple[str, ...]
    cuda: bool

    def to_dict(self) -> JsonObject:
        return {"extra_cflags": list(self.extra_cflags), "cuda": self.cuda}

    @classmethod
    def from_dict(cls, data: object) -> HeaderFlags:
        r = Reader(data, "a header's flags")
        return cls(extra_cflags=tuple(r.texts("extra_cflags", optional=True)), cuda=r.flag("cuda", False))


@dataclass(frozen=True, kw_only=True)
class CompileRequest:
    """Import the candidate at ``candidate_path`` (None: a trusted warm-up of ``warmup``),
    building what the read-only cache lacks into ``staging_dir`` (``delegate``: plain
    ``load_inline`` builds go to the trusted builder)."""

    op: ClassVar[Op] = Op.COMPILE
    candidate_path: Path | None
    pch: HeaderMode
    builds_dir: Path
    staging_dir: Path
    arch_list: str
    max_jobs: int
    delegate: bool = False
    warmup: tuple[HeaderFlags, ...] = ()

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {
            "candidate_path": str(self.candidate_path) if self.candidate_path is not None else None,
            "pch": self.pch.value, "builds_dir": str(self.builds_dir), "staging_dir": str(self.staging_dir),
            "arch_list": self.arch_list, "max_jobs": self.max_jobs, "delegate": self.delegate,
            "warmup": [f.to_dict() for f in self.warmup]})

    @classmethod
    def from_dict(cls, data: object) -> CompileRequest:
        r = Reader(data, "the compile request")
        path = r.optional_text("candidate_path")
        return cls(candidate_path=Path(path) if path is not None else None, pch=HeaderMode(r.text("pch")),
                   builds_dir=Path(r.text("builds_dir")), staging_dir=Path(r.text("staging_dir")),
                   arch_list=r.text("arch_list"), max_jobs=r.integer("max_jobs"), delegate=r.flag("delegate", False),
                   warmup=tuple(r.items_of("warmup", HeaderFlags.from_dict, optional=True)))


@dataclass(frozen=True, kw_only=True)
class Delegation:
    """A compile or candidate sandbox asks for one build: its ``load_inline`` call as plain data,
    which only the builder reads (and checks); None when the sandbox sent something other than an
    object, or a build the builder refuses (``refusal`` says why: the candidate sandbox asks anyway,
    to be told so). From a candidate sandbox, ``phase`` says where the candidate builds it (a lazy
    build) and ``name`` which extension: labels for the verdict, never trusted for the build."""

    op: ClassVar[Op] = Op.DELEGATE
    request: JsonObject | None
    name: str = ""
    phase: BuildPhase | None = None
    refusal: str | None = None

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {"request": self.request, "name": self.name,
                                "phase": self.phase.value if self.phase is not None else None,
                                "refusal": self.refusal})

    @classmethod
    def parse(cls, raw: JsonObject) -> Delegation | None:
        """The delegation ``raw`` is, or None if it is another message (the sandbox's reply)."""
        if raw.get("op") != Op.DELEGATE.value:
            return None
        request, name, phase, refusal = (raw.get(k) for k in ("request", "name", "phase", "refusal"))
        return cls(request=dict(request) if isinstance(request, dict) else None,
                   name=name[:200] if isinstance(name, str) else "",
                   phase=BuildPhase(phase) if phase in tuple(BuildPhase) else None,
                   refusal=refusal[:500] if isinstance(refusal, str) else None)


@dataclass(frozen=True, kw_only=True)
class CompileReply:
    """What the compile sandbox found: ``ok``, or the trimmed ``errors`` and a ``message`` naming
    what failed; the extensions it built or reused, and their kernels' ptxas figures; the builds
    that raised while the import went on (``swallowed``: the candidate caught the error)."""

    ok: bool
    seconds: float = 0.0
    errors: str = ""
    message: str = ""
    extensions: tuple[ExtensionBuild, ...] = ()
    kernels: tuple[KernelInfo, ...] = ()
    swallowed: tuple[BuildFailure, ...] = ()

    def to_dict(self) -> JsonObject:
        return {"ok": self.ok, "seconds": self.seconds, "errors": self.errors, "message": self.message,
                "extensions": [e.to_dict() for e in self.extensions], "kernels": [k.to_dict() for k in self.kernels],
                "swallowed": [f.to_dict() for f in self.swallowed]}

    @classmethod
    def from_dict(cls, data: object) -> CompileReply:
        r = Reader(data, "the compile sandbox's reply")
        return cls(ok=r.flag("ok"), seconds=r.number("seconds", 0.0), errors=r.text("errors", ""),
                   message=r.text("message", ""),
                   extensions=tuple(r.items_of("extensions", ExtensionBuild.from_dict, optional=True)),
                   kernels=tuple(r.items_of("kernels", KernelInfo.from_dict, optional=True)),
                   swallowed=tuple(r.items_of("swallowed", BuildFailure.from_dict, optional=True)))


@dataclass(frozen=True, kw_only=True)
class BuilderBuild:
    """Build one delegated ``request`` in a builder sandbox (the first one configures it)."""

    op: ClassVar[Op] = Op.BUILD
    request: JsonObject
    builds_dir: Path
    staging_dir: Path
    arch_list: str
    max_jobs: int
    pch: bool

    def to_dict(self) -> JsonObject:
        return tagged(self.op, {"request": self.request, "builds_dir": str(self.builds_dir),
                                "staging_dir": str(self.staging_dir), "arch_list": self.arch_list,
                                "max_jobs": self.max_jobs, "pch": self.pch})

    @classmethod
    def from_dict(cls, data: object) -> BuilderBuild:
        r = Reader(data, "a builder's request")
        return cls(request=r.object("request"), builds_dir=Path(r.text("builds_dir")),
                   staging_dir=Path(r.text("staging_dir")), arch_list=r.text("arch_list"),
                   max_jobs=r.integer("max_jobs"), pch=r.flag("pch", True))
