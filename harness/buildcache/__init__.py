"""Extension builds keyed by content, shared by every candidate with the same sources.

Inside a sandbox, `BuildCache.install()` replaces ``torch.utils.cpp_extension.load_inline``
and ``load`` with versions that build into ``<builds>/<name>-<key>`` where the key hashes the
name, sources, functions, flags, torch and CUDA versions and target arch. A Python-only edit of a
candidate therefore reuses its build. In ``build`` mode (the compile sandbox, no GPU visible) a
missing build is compiled under an ``flock`` (released by the kernel if the compiler is killed;
torch's own lock file is removed while we hold ours, so a killed build leaves no lock behind).
The referee's compile sandbox sees the cache read-only (its import-time code is the candidate's):
it builds into a private ``staging`` directory, and the trusted side moves finished builds into
the cache with `publish_staged`, never replacing one that exists. In
``load`` mode (the candidate sandbox, caches read-only) the built module is imported directly and a
missing one is an error: the candidate must build the same sources it built at compile time.

Precompiled header (``build`` mode, g++ only). Parsing ``<torch/extension.h>`` is most of a C++
binding's compile. Torch's own ``use_pch`` writes its ``.gch`` beside torch's headers and deletes
it whenever a candidate passes the default, so the cache keeps its own: per key of (compiler,
torch, the exact C++ flags torch passes for the ``.cpp`` files, ``-DTORCH_EXTENSION_NAME`` aside,
which no torch header mentions) ``<builds>/pch/<key>/torch/extension.h.gch``, found first through
an ``-I`` placed before torch's ``-isystem`` directories, with a copy of the header beside it
(g++ reads any later ``#include <torch/extension.h>`` from the directory where it found the PCH:
load_inline's implicit include followed by the source's own failed without it). g++ uses it only
where the file's first line of code is ``#include <torch/extension.h>`` (as in every prompted
binding, and in every file load_inline writes with its implicit headers) and it was built
with the same settings; anywhere else it parses the header as before, so a PCH changes compile
times, never a result. A new PCH is probed once (``-H`` must report it used) before it is used,
and is published like a build (the compile sandbox builds it in its staging directory); the
probe includes the header twice, as load_inline's files do. The PCH key
uses the flags normalised (`normalise_header_flags`): options that cannot change what the header
means (empty strings, ``-v``, warnings, debug info, a repeated ``-std``) are dropped; each ``-O``
level keeps a header of its own (g++ 12 accepts an ``-O2`` header at ``-O1``, the g++ 13 of the
H200 host refuses it); g++ checks each use (``-Winvalid-pch`` reports a refusal, recorded as
``rejected``).

Trusted builds and object reuse. In ``build`` mode with a ``delegate`` (the referee's compile
sandbox), a ``load_inline`` whose arguments are plain data and whose flags are on an allowlist
(`builder_refusal`) is not compiled in the candidate's process: the request goes to the trusted
side, which runs it in a *builder* (``builder`` mode: a sandbox that never runs candidate code and
never imports what it builds) and publishes the build; the candidate's sandbox then loads it. The
builder keeps each translation unit's object in ``<builds>/objects/<key>`` (key: the source text,
the exact compile command's flags, the compiler, torch and CUDA) and, for the next build, copies
an object whose key exists instead of compiling it (the ninja edge becomes a copy), so an
attempt that changes only ``cuda_sources`` recompiles only ``cuda.cu`` and links. An object is
kept only if it depends on nothing but its own source and read-only system, toolkit and torch
headers. Objects are published only from builders: a candidate's import-time code never runs
where objects are made, so it cannot plant one. Anything else (``load`` of files, include paths,
unusual flags) builds in the compile sandbox as before, without object reuse.

Modules: `layout` (the directory layout and recipe numbers), `flags` (what a PCH and a delegated
build accept), `compiler` (errors, ptxas counts, compiler identities, ninja's log), `pch`
(precompiled headers), `objects` (object reuse in builders), `ninja` (where both hook into the
ninja file torch writes), `records` (what is recorded of each build: `BuildRecord`, and a
builder's `BuildAnswer`), `copies` (publishing and copying builds), `cache` (`BuildCache`, which
installs itself over torch's ``load_inline``/``load``).

Shared by both sides of the referee, so it stays here rather than in `harness.sandboxed`: the
sandboxes build and load with `BuildCache` (torch imported inside its functions only), and the
driver side (`compiler`, `candidaterun`, `lazybuilds`) publishes, copies and reads the records,
standard library only.
"""

from harness.buildcache.cache import BuildCache
from harness.buildcache.compiler import BuildError, is_source_error, parse_ptxas, trim_compiler_errors
from harness.buildcache.copies import build_directory, copy_build, publish_staged
from harness.buildcache.flags import builder_refusal, normalise_header_flags
from harness.buildcache.layout import TRUSTED_DIR
from harness.buildcache.pch import _first_line_includes_torch, build_pch

__all__ = [
    "TRUSTED_DIR", "BuildCache", "BuildError", "_first_line_includes_torch", "build_directory", "build_pch",
    "builder_refusal", "copy_build", "is_source_error", "normalise_header_flags", "parse_ptxas", "publish_staged",
    "trim_compiler_errors",
]
