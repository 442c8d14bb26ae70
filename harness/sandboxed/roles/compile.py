"""Compile sandbox: import the candidate with no GPU visible, building its extensions into the cache.

A `CompileRequest` without a ``candidate_path`` (a warm-up: its ``warmup`` flag sets) instead
builds a tiny trusted binding per flag set before any candidate code runs, which leaves the
precompiled torch header of those flags in the staging directory: a trusted side that publishes
PCHs only from such sandboxes (``publish_staged(..., pch=False)`` for candidates' sandboxes) keeps
candidates from planting one.

A `BuilderBuild` as the first request makes the sandbox a *builder*: it runs no candidate code,
builds each `BuilderBuild` it receives (a candidate's ``load_inline``, as plain data) into its
staging directory, reusing and keeping per-translation-unit objects, imports nothing it built,
and answers each with a `BuildAnswer`; the trusted side publishes what it staged. A candidate's
compile request with ``delegate`` sends such builds (a `Delegation`) to the trusted side over its
channel and waits for the answer before loading the published build (`harness.protocol.build`).
"""

from __future__ import annotations

import secrets
import time

from harness.buildcache import BuildCache, BuildError, trim_compiler_errors
from harness.buildcache.records import BuildAnswer
from harness.channel import Channel, ChannelClosed
from harness.protocol import Op, Ready, op_of
from harness.protocol.build import BuilderBuild, CompileReply, CompileRequest, Delegation, HeaderFlags, HeaderMode
from harness.sandboxed.roles.loading import brief_error, load_candidate_module

#: How the cache takes a request's header mode (`BuildCache`'s ``pch``).
_CACHE_PCH: dict[HeaderMode, bool | str] = {HeaderMode.OFF: False, HeaderMode.USE: "use", HeaderMode.BUILD: True}


def serve(channel: Channel) -> None:
    # What every candidate imports first (3-4 s on the H200 host), paid before one arrives: the
    # referee may start this sandbox ahead of its attempt and waits for "ready".
    import torch.utils.cpp_extension  # noqa: F401

    channel.send(Ready())
    raw = channel.recv()
    if op_of(raw) is Op.BUILD:
        _serve_builds(channel, BuilderBuild.from_dict(raw))
        return
    request = CompileRequest.from_dict(raw)

    def delegate(build: Delegation) -> BuildAnswer:
        channel.send(build)
        return BuildAnswer.from_dict(channel.recv())

    cache = BuildCache(request.builds_dir, mode="build", arch_list=request.arch_list, max_jobs=request.max_jobs,
                       staging=request.staging_dir, pch=_CACHE_PCH[request.pch],
                       delegate=delegate if request.delegate else None)
    cache.install()
    started = time.perf_counter()
    if request.candidate_path is None:
        ok, message, errors = _warm_up(request.warmup)
        channel.send(CompileReply(ok=ok, message=message, errors=errors,
                                  seconds=round(time.perf_counter() - started, 3),
                                  extensions=tuple(r.to_extension() for r in cache.records)))
        return
    ok, message, errors = True, "", ""
    raised: BaseException | None = None
    try:
        load_candidate_module(request.candidate_path)
    except BuildError as exc:
        raised, ok, errors = exc, False, trim_compiler_errors(exc.log)
        message = f"extension {exc.name!r} failed to compile"
    except BaseException as exc:  # noqa: BLE001 - any import failure is the candidate's
        raised, ok, errors, message = exc, False, brief_error(exc), "importing the candidate failed"
    # An extension's "pch": whether its C++ compile used the precompiled torch header (status, key, seconds).
    # A failed build that did not end the import was caught: the candidate went on without it.
    swallowed = [e for e in cache.errors if e is not raised]
    failed = {(e.name, e.key) for e in swallowed}  # not built: no extension of the candidate's
    built = [r for r in cache.records if (r.name, r.key) not in failed]
    channel.send(CompileReply(ok=ok, message=message, errors=errors,
                              seconds=round(time.perf_counter() - started, 3),
                              extensions=tuple(r.to_extension() for r in built),
                              kernels=tuple(k for r in built for k in r.kernels or ()),
                              swallowed=tuple(e.failure() for e in swallowed)))


def _serve_builds(channel: Channel, first: BuilderBuild) -> None:
    """A builder: build each request it is sent, the first with its configuration (trusted code
    only; nothing it builds is loaded), until the channel closes or another message comes."""
    cache = BuildCache(first.builds_dir, mode="builder", arch_list=first.arch_list, max_jobs=first.max_jobs,
                       staging=first.staging_dir, pch="use" if first.pch else False)
    cache.install()
    message = first
    while True:
        started = time.perf_counter()
        try:
            record = cache.build_request(message.request)
            answer = BuildAnswer(ok=True, key=record.key, record=record)
        except BuildError as exc:
            answer = BuildAnswer(ok=False, log=exc.log, record=cache.records[-1] if cache.records else None)
        except Exception as exc:  # noqa: BLE001 - a malformed request fails that build only
            answer = BuildAnswer(ok=False, log=f"{type(exc).__name__}: {exc}")
        channel.send(BuildAnswer(ok=answer.ok, log=answer.log, key=answer.key, record=answer.record,
                                 seconds=round(time.perf_counter() - started, 3)))
        try:
            raw = channel.recv()
        except (ChannelClosed, OSError):
            return
        if op_of(raw) is not Op.BUILD:
            return
        message = BuilderBuild.from_dict(raw)


_WARMUP_CPP = "#include <torch/extension.h>\nint kl_pch_warmup_probe() { return 1; }\n"
_WARMUP_CUDA = "#include <cuda_runtime.h>\nint kl_pch_warmup_cuda() { return 0; }\n"


def _warm_up(flag_sets: tuple[HeaderFlags, ...]) -> tuple[bool, str, str]:
    """Build a tiny binding per flag set (trusted code only): their PCHs land in the staging dir.
    Returns ``(ok, message, errors)`` of the last failure (a warm-up failure fails nothing else)."""
    from torch.utils.cpp_extension import load_inline

    ok, message, errors = True, "", ""
    # A name of its own each time: a cached build would not go through the PCH and report its key.
    nonce = secrets.token_hex(4)
    for i, flags in enumerate(flag_sets):
        try:
            load_inline(name=f"kl_pch_warmup_{'cuda' if flags.cuda else 'cpu'}_{nonce}", cpp_sources=_WARMUP_CPP,
                        cuda_sources=_WARMUP_CUDA if flags.cuda else None, functions=["kl_pch_warmup_probe"],
                        extra_cflags=list(flags.extra_cflags), no_implicit_headers=True)
        except BaseException as exc:  # noqa: BLE001 - reported; a warm-up failure fails nothing else
            ok, message = False, f"PCH warm-up {i} failed"
            errors = trim_compiler_errors(getattr(exc, "log", "")) or brief_error(exc)
    return ok, message, errors
