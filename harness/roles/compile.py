"""Compile stage: import the candidate with no GPU visible, building its extensions into the cache."""

from __future__ import annotations

import time
from pathlib import Path

from harness.buildcache import BuildCache, BuildError, trim_compiler_errors
from harness.roles.loading import brief_error, load_candidate_module
from harness.sandbox import Channel


def serve(channel: Channel) -> None:
    request = channel.recv()
    staging = request.get("staging_dir")
    cache = BuildCache(Path(request["builds_dir"]), mode="build", arch_list=request["arch_list"],
                       max_jobs=request["max_jobs"], staging=Path(staging) if staging else None)
    cache.install()
    started = time.perf_counter()
    reply: dict = {"ok": True, "errors": "", "message": ""}
    try:
        load_candidate_module(Path(request["candidate_path"]))
    except BuildError as exc:
        reply.update(ok=False, errors=trim_compiler_errors(exc.log),
                     message=f"extension {exc.name!r} failed to compile")
    except BaseException as exc:  # noqa: BLE001 - any import failure is the candidate's
        reply.update(ok=False, errors=brief_error(exc), message="importing the candidate failed")
    reply["seconds"] = round(time.perf_counter() - started, 3)
    reply["extensions"] = [{k: r[k] for k in ("name", "key", "cached", "seconds")} for r in cache.records]
    reply["kernels"] = [k for r in cache.records for k in r.get("kernels", [])]
    channel.send(reply)
