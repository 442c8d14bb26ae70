"""Compile stage: import the candidate with no GPU visible, building its extensions into the cache.

A request with ``pch_warmup`` (a list of ``{"extra_cflags": [...], "cuda": bool}``) and no
``candidate_path`` instead builds a tiny trusted binding per flag set before any candidate code
runs, which leaves the precompiled torch header of those flags in the staging directory: a
trusted side that publishes PCHs only from such stages (``publish_staged(..., pch=False)`` for
candidates' stages) keeps candidates from planting one.

A request with ``"builder": true`` makes the stage a *builder*: it runs no candidate code, builds
each ``{"op": "build", "request": ...}`` it receives (a candidate's ``load_inline``, as plain data)
into its staging directory, reusing and keeping per-translation-unit objects, imports nothing it
built, and answers each one; the trusted side publishes what it staged. A candidate's compile
request with ``"delegate": true`` sends such builds (``{"build": request}``) to the trusted side
over its channel and waits for the answer before loading the published build.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from harness.buildcache import BuildCache, BuildError, trim_compiler_errors
from harness.roles.loading import brief_error, load_candidate_module
from harness.sandbox import Channel, ChannelClosed


def serve(channel: Channel) -> None:
    # What every candidate imports first (3-4 s on the H200 host), paid before one arrives: the
    # referee may start this stage ahead of its attempt and waits for "ready".
    import torch.utils.cpp_extension  # noqa: F401

    channel.send({"ready": True})
    request = channel.recv()
    if request.get("builder"):
        _serve_builds(channel, request)
        return
    staging = request.get("staging_dir")
    # True / False, "use" (published PCHs only, never build one), None: the cache's default (on
    # unless <builds>/pch/disabled exists).
    pch = request.get("pch")

    def delegate(build: dict[str, Any]) -> dict[str, Any]:
        channel.send({"build": build})
        return channel.recv()

    cache = BuildCache(Path(request["builds_dir"]), mode="build", arch_list=request["arch_list"],
                       max_jobs=request["max_jobs"], staging=Path(staging) if staging else None,
                       pch=pch if isinstance(pch, bool) or pch == "use" else None,
                       delegate=delegate if request.get("delegate") else None)
    cache.install()
    started = time.perf_counter()
    reply: dict[str, Any] = {"ok": True, "errors": "", "message": ""}
    if "pch_warmup" in request:
        _warm_up(request["pch_warmup"], reply)
        reply["seconds"] = round(time.perf_counter() - started, 3)
        reply["extensions"] = _extensions(cache)
        channel.send(reply)
        return
    try:
        load_candidate_module(Path(request["candidate_path"]))
    except BuildError as exc:
        reply.update(ok=False, errors=trim_compiler_errors(exc.log),
                     message=f"extension {exc.name!r} failed to compile")
    except BaseException as exc:  # noqa: BLE001 - any import failure is the candidate's
        reply.update(ok=False, errors=brief_error(exc), message="importing the candidate failed")
    reply["seconds"] = round(time.perf_counter() - started, 3)
    # "pch": whether the C++ compile used the precompiled torch header (status, key, build seconds).
    reply["extensions"] = _extensions(cache)
    reply["kernels"] = [k for r in cache.records for k in r.get("kernels", [])]
    channel.send(reply)


#: What a compile reply tells about each extension (the verdict's compile section).
_EXTENSION_FIELDS = ("name", "key", "cached", "seconds", "pch", "via", "builder_refusal")
#: What it tells about each translation unit of a trusted build.
_UNIT_FIELDS = ("source", "key", "reused", "seconds", "torch_headers", "kept", "first_seconds")


def _extensions(cache: BuildCache) -> list[dict[str, Any]]:
    extensions = []
    for record in cache.records:
        entry = {k: record[k] for k in _EXTENSION_FIELDS if k in record}
        if isinstance(record.get("objects"), list):
            entry["units"] = [{k: u[k] for k in _UNIT_FIELDS if k in u} for u in record["objects"]
                              if isinstance(u, dict)]
        extensions.append(entry)
    return extensions


def _serve_builds(channel: Channel, first: dict[str, Any]) -> None:
    """A builder: build each request it is sent, the first with its configuration (trusted code
    only; nothing it builds is loaded), until the channel closes or another message comes."""
    cache = BuildCache(Path(first["builds_dir"]), mode="builder", arch_list=first["arch_list"],
                       max_jobs=first["max_jobs"], staging=Path(first["staging_dir"]),
                       pch="use" if first.get("pch", True) else False)
    cache.install()
    message = first
    while message.get("op") == "build":
        started = time.perf_counter()
        answer: dict[str, Any] = {"ok": True, "log": ""}
        try:
            record = cache.build_request(message.get("request") or {})
            answer["key"] = record["key"]
            answer["record"] = {k: v for k, v in record.items() if k != "extra_cflags"}
        except BuildError as exc:
            answer.update(ok=False, log=exc.log, record=cache.records[-1] if cache.records else {})
        except Exception as exc:  # noqa: BLE001 - a malformed request fails that build only
            answer.update(ok=False, log=f"{type(exc).__name__}: {exc}")
        answer["seconds"] = round(time.perf_counter() - started, 3)
        channel.send(answer)
        try:
            message = channel.recv()
        except (ChannelClosed, OSError):
            return


_WARMUP_CPP = "#include <torch/extension.h>\nint kl_pch_warmup_probe() { return 1; }\n"
_WARMUP_CUDA = "#include <cuda_runtime.h>\nint kl_pch_warmup_cuda() { return 0; }\n"


def _warm_up(flag_sets: list[dict[str, Any]], reply: dict[str, Any]) -> None:
    """Build a tiny binding per flag set (trusted code only): their PCHs land in the staging dir."""
    from torch.utils.cpp_extension import load_inline

    # A name of its own each time: a cached build would not go through the PCH and report its key.
    nonce = secrets.token_hex(4)
    for i, flags in enumerate(flag_sets):
        cflags = [str(f) for f in flags.get("extra_cflags", [])]
        cuda = bool(flags.get("cuda"))
        try:
            load_inline(name=f"kl_pch_warmup_{'cuda' if cuda else 'cpu'}_{nonce}", cpp_sources=_WARMUP_CPP,
                        cuda_sources=_WARMUP_CUDA if cuda else None, functions=["kl_pch_warmup_probe"],
                        extra_cflags=cflags, no_implicit_headers=True)
        except BaseException as exc:  # noqa: BLE001 - reported; a warm-up failure fails nothing else
            reply.update(ok=False, message=f"PCH warm-up {i} failed",
                         errors=trim_compiler_errors(getattr(exc, "log", "")) or brief_error(exc))
