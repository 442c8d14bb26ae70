"""A candidate sandbox's lazy builds, on the trusted side: built, handed to the sandbox, recorded.

Most LLM-written kernels build their extension where it is first needed: in ``ModelNew.__init__``,
on the first forward, in a helper behind a cache, or at import behind ``torch.cuda.is_available()``
(False in the compile sandbox, which sees no GPU). The compile sandbox only imports the candidate, so
such a build is first asked for in the candidate sandbox, which cannot build (the cache is out of its
sight). It asks the trusted side instead, over its channel (a `Delegation`, as the compile sandbox
does): `LazyBuilds.serve` has the trusted builder build it (`harness.compiler.CompileClient
.build_lazily`: same cache, same flag rules), copies the published build into the sandbox's own
builds (its only view of any) and answers; the sandbox then loads it. A build the builder refuses
(``load()`` of files, include paths, unusual flags) is answered with an error saying to build it at
import, where the compile sandbox builds it.

Build time is compile time: the candidate run stops its step's clock while a build runs, and the
verdict's compile section counts every lazy build (`merged`), marked with where it happened
(`vocabulary.builds.BuildPhase`). A failed build the candidate caught is a swallowed failure, named
first in the verdict (`vocabulary.causes`); one it did not catch ends the evaluation as a compile
error (`propagated`). Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harness.buildcache import copy_build, trim_compiler_errors
from harness.buildcache.records import BuildAnswer
from harness.protocol.build import Delegation
from vocabulary.builds import BuildFailure, BuildPhase, CompileResult, ExtensionBuild, KernelInfo
from vocabulary.wire import JsonObject

__all__ = ["MAX_LAZY_BUILDS", "LazyBuilds", "lazy_where", "refusal_text"]

#: A candidate sandbox may ask for at most this many lazy builds (the compile sandbox's limit too).
MAX_LAZY_BUILDS = 16
#: A lazy build's phase, as its messages say it.
_WHERE = {
    BuildPhase.IMPORT: "at import, in the candidate sandbox only: the compile sandbox, which has no GPU "
                       "(torch.cuda.is_available() is False there), did not build it",
    BuildPhase.INIT: "in ModelNew.__init__",
    BuildPhase.FORWARD: "in forward",
}


def refusal_text(delegation: Delegation) -> str:
    """Why a lazy build the trusted builder refuses is not built, and what to do instead."""
    where = _WHERE[delegation.phase] if delegation.phase is not None else "outside the compile sandbox"
    refusal = delegation.refusal or "arguments that are not plain data"
    return (f"extension {delegation.name!r} is built lazily ({where}) with {refusal}: "
            "a build outside the compile sandbox goes through the trusted builder, which takes plain load_inline "
            "calls only (no load() of files, no include or library paths, no flags with paths or plugins). Build "
            "this one at import: at module level and unconditionally, where the compile sandbox builds it.")


def lazy_where(phase: BuildPhase | None) -> str:
    """Where a lazy build happened, for a message."""
    return f"built lazily, {_WHERE[phase]}" if phase is not None else "built lazily"


class LazyBuilds:
    """The lazy builds of one candidate sandbox (see the module's docstring).

    Args:
        build: builds one request in the trusted builder and publishes it
            (`harness.compiler.CompileClient.build_lazily`); None: no builder (every lazy build fails).
        builds_dir: the cache the builder publishes into.
        sandbox_builds: the candidate sandbox's own builds, where a finished build is copied.
    """

    def __init__(self, build: Callable[[JsonObject | None], BuildAnswer] | None, builds_dir: Path,
                 sandbox_builds: Path) -> None:
        self._build = build
        self._builds_dir = builds_dir
        self._sandbox_builds = sandbox_builds
        self.asked = 0
        #: Seconds spent building (never charged to a step's time limit).
        self.seconds = 0.0
        self.built: list[ExtensionBuild] = []
        self.kernels: list[KernelInfo] = []
        #: Failed builds of the request in flight, then `swallowed` or `propagated` (`settle`).
        self._pending: list[BuildFailure] = []
        self.swallowed: list[BuildFailure] = []
        self.propagated: list[BuildFailure] = []

    def serve(self, delegation: Delegation) -> BuildAnswer:
        """Build what the sandbox asked for, hand it over, and record it; the answer goes back to it."""
        started = time.perf_counter()
        self.asked += 1
        answer = self._answer(delegation)
        spent = time.perf_counter() - started
        self.seconds += spent
        record = answer.record
        if answer.ok and record is not None and answer.key is not None:
            self.built.append(replace(record.to_extension(), lazy=delegation.phase, via="builder"))
            self.kernels.extend(record.kernels or ())
        else:
            name = record.name if record is not None else delegation.name
            self._pending.append(BuildFailure(name=name or "?", errors=trim_compiler_errors(answer.log),
                                              lazy=delegation.phase))
        return BuildAnswer(ok=answer.ok, log=answer.log, key=answer.key, record=answer.record, seconds=round(spent, 3))

    def _answer(self, delegation: Delegation) -> BuildAnswer:
        if self.asked > MAX_LAZY_BUILDS:
            return BuildAnswer(ok=False, log=f"more than {MAX_LAZY_BUILDS} extensions")
        if delegation.request is None or delegation.refusal is not None:
            return BuildAnswer(ok=False, log=refusal_text(delegation))
        if self._build is None:
            return BuildAnswer(ok=False, log="this referee builds no extension outside the compile sandbox")
        answer = self._build(delegation.request)
        record = answer.record
        if answer.ok and record is not None and answer.key is not None:
            if not (record.name.isidentifier() and answer.key.isalnum()):
                return BuildAnswer(ok=False, log="the builder answered with a malformed build")
            copy_build(self._builds_dir, record.name, answer.key, self._sandbox_builds, trusted=True)
        return answer

    def settle(self, *, ok: bool) -> None:
        """The sandbox answered the request in flight: the builds that failed during it were caught
        (``ok``: it carried on) or ended it."""
        (self.swallowed if ok else self.propagated).extend(self._pending)
        self._pending = []

    def extension_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.name for e in self.built))

    def merged(self, compiled: CompileResult | None) -> CompileResult | None:
        """The compile section with the lazy builds in it: their seconds, extensions, kernels and
        swallowed failures, and, if one ended the evaluation, its errors (``ok`` False)."""
        if compiled is None or not (self.asked or self._pending):
            return compiled
        failed = self.propagated
        return replace(compiled, ok=compiled.ok and not failed, seconds=round(compiled.seconds + self.seconds, 3),
                       extensions=(*compiled.extensions, *self.built), kernels=(*compiled.kernels, *self.kernels),
                       errors="\n".join(f.errors for f in failed) if failed else compiled.errors,
                       swallowed=(*compiled.swallowed, *self.swallowed, *self._pending))

