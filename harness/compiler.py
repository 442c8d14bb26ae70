"""The referee's side of the compile: a compile sandbox per candidate, its builder, header warm-ups.

`CompileClient.compile` imports a candidate in a compile sandbox with no GPU visible; the builds it
lacks go to a private staging directory and are published once the sandbox has exited (the cache
is read-only to it: its import-time code is the candidate's). A ``load_inline`` of plain data is
delegated to a builder sandbox that runs trusted code only (`_build_for`); a request the builder's
compiler refused is answered again from memory for the rest of the Referee's life (the agent often
sends the same broken extension with another ``forward``, or checks the source it just failed to
compile). Precompiled torch headers
are built only by trusted warm-up sandboxes (`warm_headers`), never published from a candidate's.
The compile sandbox's reply is read where it enters: a malformed one fails the compile.
Standard library only.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from harness.buildcache import build_directory, is_source_error, publish_staged
from harness.buildcache.copies import current_pch_entries
from harness.buildcache.records import BuildAnswer
from harness.channel import ChannelClosed, ChannelTimeout
from harness.options import HarnessOptions
from harness.progress import StageReporter
from harness.protocol.build import BuilderBuild, CompileReply, CompileRequest, Delegation, HeaderFlags, HeaderMode
from harness.sandboxpool import SandboxPool, SandboxRole, StartedSandbox
from vocabulary.builds import CompileResult
from vocabulary.evaluation import Target
from vocabulary.stages import StageName
from vocabulary.wire import JsonObject, WireError

__all__ = ["PCH_FLAG_SETS", "CompileClient"]

#: Binding flags whose torch header the trusted warm-up precompiles, per target (a PCH serves only
#: the flags it was built with, normalised: ``""`` and ``-v`` are nothing, each ``-O`` level its own).
#: The first is what the playbook prescribes: a Referee builds it before its first compile if it is
#: missing. All of them are built when a worker starts (`harness.warm_headers`): no flags at all
#: (KernelBench's ``extra_cflags=[""]``, torch's default ``-O0``), ``-O3`` (what models often
#: write), and on CPU ``-O3`` without OpenMP.
PCH_FLAG_SETS: dict[Target, tuple[HeaderFlags, ...]] = {
    Target.CUDA: (HeaderFlags(extra_cflags=("-O1",), cuda=True), HeaderFlags(extra_cflags=(), cuda=True),
                  HeaderFlags(extra_cflags=("-O3",), cuda=True)),
    Target.CPU: (HeaderFlags(extra_cflags=("-O3", "-fopenmp"), cuda=False), HeaderFlags(extra_cflags=(), cuda=False),
                 HeaderFlags(extra_cflags=("-O3",), cuda=False)),
}
#: A header's warm-up sandbox gets this many compile time limits: a PCH build alone took 480 s on a
#: 2-core host under a load of 15 (a minute on the H200 host), and no attempt waits for the extras.
_WARMUP_TIME_FACTOR = 3
#: A candidate's compile may ask the trusted builder for at most this many builds (extensions).
_MAX_DELEGATED_BUILDS = 16
#: What a compile sandbox that answered nonsense is told (its code is the candidate's).
_MALFORMED = "the compile sandbox sent a malformed reply"


class CompileClient:
    """One Referee's compiles (see the module's docstring).

    Args:
        options, target: the Referee's.
        pool: where its compile and builder sandboxes come from.
        reporter: a new stage reporter for the Referee's current listener.
    """

    def __init__(self, options: HarnessOptions, target: Target, pool: SandboxPool,
                 reporter: Callable[[], StageReporter]) -> None:
        self.options = options
        self.target = target
        self._pool = pool
        self._reporter = reporter
        #: Compile results by source hash: the same source again reuses its builds without a sandbox.
        self._compiled: dict[str, CompileResult] = {}
        self._pch_ready = not options.pch
        #: Lazy builds answered, by their request's digest; the builder kept for an attempt's.
        self._lazy_answers: dict[str, BuildAnswer] = {}
        self._lazy_builder: StartedSandbox | None = None
        #: The builder's answers that its compiler refused the source, by the request's digest.
        self._refused_sources: dict[str, BuildAnswer] = {}

    def compile(self, source: str) -> CompileResult:
        """Import the candidate with no GPU visible, building its extensions into the cache.

        The same source seen before by this Referee, its builds still in the cache, needs no sandbox:
        builds are keyed by content, so importing it again would load exactly those (and no
        ``compile`` stage event is sent).
        """
        digest = hashlib.sha256(source.encode()).hexdigest()
        known = self._compiled.get(digest)
        builds = self.options.builds_dir
        if known is not None and all(build_directory(builds, e.name, e.key, trusted=e.by_builder).is_dir()
                                     for e in known.extensions):
            return CompileResult(ok=True, seconds=0.0, kernels=known.kernels,
                                 extensions=tuple(replace(e, cached=True) for e in known.extensions))
        self._warm_pch()
        with self._reporter().span(StageName.COMPILE):
            result = self._compile_in_sandbox(source=source, pch=HeaderMode.USE if self.options.pch else HeaderMode.OFF,
                                              delegate=self.options.trusted_builds)
        if result.ok:
            self._compiled[digest] = result
        if result.extensions:  # a candidate without an extension says nothing about the next one
            self._pool.builder_wanted = self.options.trusted_builds and any(
                e.by_builder and not e.cached for e in result.extensions)
            if not self._pool.builder_wanted:  # an idle builder would only hold memory until then
                self._pool.discard_spare(SandboxRole.BUILDER)
        return result

    # -- precompiled headers -----------------------------------------------------------------
    def _warm_pch(self) -> None:
        """Precompile the torch header for the prescribed flags in a sandbox that runs trusted code only.

        Candidates' compile sandboxes only use published PCHs (their import-time code could plant a
        poisoned one), so this sandbox is the only one whose PCHs are published. Skipped once the
        PCHs it recorded in ``builds/pch/warm-<target>.json`` are in place.
        """
        if self._pch_ready:
            return
        self._pch_ready = True  # once per Referee, whatever happens: a failure only costs speed
        self.warm_headers(PCH_FLAG_SETS[self.target][:1])

    def warm_headers(self, flag_sets: Sequence[HeaderFlags] | None = None) -> bool:
        """Build the precompiled torch headers of ``flag_sets`` (default: every set of the target,
        `PCH_FLAG_SETS`, the prescribed one first and on its own) in a sandbox that runs trusted
        code only, unless a marker says they are in place. One warm-up per cache and target at a
        time (a lock): a Referee whose first compile comes while a worker's start-up warm-up builds
        the prescribed header waits for it instead of building the same; once that one is in
        place it no longer waits.

        Returns:
            Whether the headers are in place.
        """
        if not self.options.pch:
            return False
        if flag_sets is None:
            prescribed = self.warm_headers(PCH_FLAG_SETS[self.target][:1])
            return self._warm(PCH_FLAG_SETS[self.target][1:], f"warm-{self.target.value}-more.json") and prescribed
        return self._warm(tuple(flag_sets), f"warm-{self.target.value}.json")

    def _warm(self, sets: tuple[HeaderFlags, ...], marker_name: str) -> bool:
        """`warm_headers` of ``sets``, recorded in ``builds/pch/<marker_name>`` (their keys)."""
        pch_dir = self.options.builds_dir / "pch"
        pch_dir.mkdir(parents=True, exist_ok=True)
        marker = pch_dir / marker_name

        def in_place() -> bool:  # headers of an older recipe (a marker from before an upgrade) are not
            try:
                keys = json.loads(marker.read_text())
                current = {entry.name for entry in current_pch_entries(pch_dir)}
                return bool(keys) and all(str(k) in current for k in keys)
            except (OSError, ValueError, TypeError):
                return False

        if not sets or in_place():
            return True
        with open(pch_dir / f".warm-{self.target.value}.lock", "w") as lock, contextlib.ExitStack() as stages:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if this process dies
            if in_place():
                return True
            stages.enter_context(self._reporter().span(StageName.HEADER_BUILD))
            # A sandbox per flag set (each header takes a compile's time limit on a busy host), as
            # many at once as the compile jobs allow two each (g++ on torch's headers: ~2 GB each).
            workers = max(1, min(len(sets), self.options.max_jobs // 2))
            limit = self.options.timeouts.compile_s * _WARMUP_TIME_FACTOR
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(lambda flags: self._compile_in_sandbox(
                    source=None, pch=HeaderMode.BUILD, warmup=(flags,), trusted=True, timeout=limit), sets))
            keys = [e.pch.key for result in results for e in result.extensions if e.pch is not None and e.pch.key]
            if not (all(r.ok for r in results) and len(keys) == len(sets)):
                return False
            tmp = marker.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(keys))
            tmp.replace(marker)
            return True

    # -- the sandboxes --------------------------------------------------------------------------
    def _compile_in_sandbox(self, *, source: str | None, pch: HeaderMode, delegate: bool = False,
                            warmup: tuple[HeaderFlags, ...] = (), trusted: bool = False,
                            timeout: float | None = None) -> CompileResult:
        """Run a compile sandbox: ``source`` is the candidate to import (None: a trusted warm-up).
        Its run directory is removed unless the compile failed (kept to debug). The builds it
        delegates (`Delegation` messages) are built by a builder sandbox (`_build_for`)."""
        # The cache is read-only to the sandbox (its import-time code is the candidate's): missing
        # builds go to a private staging directory and are published once the sandbox has exited;
        # precompiled headers only from a trusted sandbox, objects only from a builder.
        sandbox = self._pool.take(SandboxRole.COMPILE)
        staging = sandbox.run_dir / "compile" / "builds"
        candidate_path = None
        if source is not None:
            candidate_path = sandbox.run_dir / "candidate.py"
            candidate_path.write_text(source)
        request = CompileRequest(candidate_path=candidate_path, pch=pch, builds_dir=self.options.builds_dir,
                                 staging_dir=staging, arch_list=self.options.arch_list,
                                 max_jobs=self.options.max_jobs, delegate=delegate, warmup=warmup)
        started = time.perf_counter()
        timeout = timeout or self.options.timeouts.compile_s
        builder: StartedSandbox | None = None
        delegated = 0
        try:
            with sandbox.process as process:
                try:
                    sandbox.wait_ready(timeout)
                    process.channel.send(request)
                    while True:
                        raw = process.recv(timeout=max(1.0, timeout - (time.perf_counter() - started)))
                        delegation = Delegation.parse(raw)
                        if delegation is None or trusted or not delegate:
                            break
                        delegated += 1
                        if delegated > _MAX_DELEGATED_BUILDS:
                            answer = BuildAnswer(ok=False, log=f"more than {_MAX_DELEGATED_BUILDS} extensions")
                        elif (refused := self._refused_before(delegation.request)) is not None:
                            answer = refused
                        else:
                            builder = builder or self._pool.take(SandboxRole.BUILDER)
                            answer = self._build_for(builder, delegation.request, started + timeout)
                        process.channel.send(answer)
                except ChannelTimeout:
                    return CompileResult(ok=False, seconds=time.perf_counter() - started,
                                         errors=f"compile timed out after {timeout:.0f} s")
                except ChannelClosed:
                    exec_error = process.sandbox_report.exec_error
                    return CompileResult(ok=False, seconds=time.perf_counter() - started,
                                         errors=f"the compile process died ({process.describe_exit()}): "
                                         f"{exec_error}\n" + process.log_tail(4000))
        finally:
            if builder is not None:
                builder.discard()
        publish_staged(staging, self.options.builds_dir, pch=trusted)
        try:
            reply = CompileReply.from_dict(raw)
        except WireError as exc:
            return CompileResult(ok=False, seconds=time.perf_counter() - started, errors=f"{_MALFORMED}: {exc}")
        errors = reply.errors
        if not reply.ok and reply.message:
            errors = f"{reply.message}\n{errors}".strip()
        if reply.ok:
            shutil.rmtree(sandbox.run_dir, ignore_errors=True)
        return CompileResult(ok=reply.ok, seconds=reply.seconds, extensions=reply.extensions, kernels=reply.kernels,
                             errors=errors, swallowed=reply.swallowed)

    # -- lazy builds ----------------------------------------------------------------------------
    def build_lazily(self, request: JsonObject | None) -> BuildAnswer:
        """Build one ``load_inline`` that a candidate sandbox asked for as it ran (in ``__init__``,
        a forward, or an import gated on what only that sandbox has) in a builder sandbox, with the
        compile's time limit and its cache and flag rules; the builder is kept for the attempt's
        other lazy builds (`release_builder`). A request this Referee had built before, its build
        still in the cache, is answered at once: the builder computed its key from these very
        bytes. The build is published among the builder's (`_build_for`); copying it to the sandbox
        is the caller's."""
        if request is None:
            return BuildAnswer(ok=False, log="malformed build request")
        digest = _request_digest(request)
        known = self._lazy_answers.get(digest)
        if known is not None and known.record is not None and known.key is not None and build_directory(
                self.options.builds_dir, known.record.name, known.key, trusted=True).is_dir():
            return replace(known, seconds=0.0, record=replace(known.record, cached=True, seconds=0.0))
        if (refused := self._refused_before(request)) is not None:
            return refused
        self._pool.builder_wanted = True  # the next attempt's builder, started ahead
        if self._lazy_builder is not None and self._lazy_builder.process.exit_code() is not None:
            self.release_builder()
        builder = self._lazy_builder = self._lazy_builder or self._pool.take(SandboxRole.BUILDER)
        limit = self.options.timeouts.compile_s
        try:
            answer = self._build_for(builder, request, time.perf_counter() + limit)
        except ChannelTimeout:
            self.release_builder()
            return BuildAnswer(ok=False, log=f"the build timed out after {limit:.0f} s")
        if answer.ok and answer.key is not None and answer.record is not None:
            self._lazy_answers[digest] = answer
        return answer

    def release_builder(self) -> None:
        """End the builder kept for an attempt's lazy builds, if one was started."""
        if self._lazy_builder is not None:
            self._lazy_builder.discard()
            self._lazy_builder = None

    def _build_for(self, builder: StartedSandbox, build: JsonObject | None, deadline: float) -> BuildAnswer:
        """Build one extension a candidate's compile sandbox asked for, in the builder sandbox (trusted
        code only), and publish it with the objects it kept; the answer goes back to the sandbox.
        A builder that dies fails that build; one that runs out of the compile's time limit raises
        `ChannelTimeout` (the compile timed out)."""
        if build is None:
            return BuildAnswer(ok=False, log="malformed build request")
        staging = builder.run_dir / "compile" / "builds"
        try:
            builder.wait_ready(max(1.0, deadline - time.perf_counter()))
            raw = builder.process.request(
                BuilderBuild(request=build, builds_dir=self.options.builds_dir, staging_dir=staging,
                             arch_list=self.options.arch_list, max_jobs=self.options.max_jobs, pch=self.options.pch),
                timeout=max(1.0, deadline - time.perf_counter()))
        except ChannelTimeout:
            builder.process.kill()
            raise  # the compile's time limit: reported as before, "compile timed out"
        except ChannelClosed:
            log = builder.process.log_tail(4000)
            builder.process.kill()
            return BuildAnswer(ok=False, log=f"the build process died ({builder.process.describe_exit()})\n{log}")
        publish_staged(staging, self.options.builds_dir, pch=False, objects=True, trusted=True)
        try:
            answer = BuildAnswer.from_dict(raw)
        except WireError as exc:
            return BuildAnswer(ok=False, log=f"the build process sent a malformed answer: {exc}")
        if not answer.ok and is_source_error(answer.log):
            self._refused_sources[_request_digest(build)] = answer
        return answer

    def _refused_before(self, request: JsonObject | None) -> BuildAnswer | None:
        """The builder's answer to these very bytes, if its compiler refused them earlier in this
        Referee (no builder is started for it); None otherwise."""
        if request is None:
            return None
        refused = self._refused_sources.get(_request_digest(request))
        if refused is None:
            return None
        record = replace(refused.record, seconds=0.0) if refused.record is not None else None
        return replace(refused, seconds=0.0, record=record)


def _request_digest(request: JsonObject) -> str:
    """A build request's identity: its arguments, as the builder computes its key from them."""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
