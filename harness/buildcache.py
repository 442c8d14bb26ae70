"""Extension builds keyed by content, shared by every candidate with the same sources.

Inside a stage process, `BuildCache.install()` replaces ``torch.utils.cpp_extension.load_inline``
and ``load`` with versions that build into ``<builds>/<name>-<key>`` where the key hashes the
name, sources, functions, flags, torch and CUDA versions and target arch. A Python-only edit of a
candidate therefore reuses its build. In ``build`` mode (the compile stage, no GPU visible) a
missing build is compiled under an ``flock`` (released by the kernel if the compiler is killed;
torch's own lock file is removed while we hold ours, so a killed build leaves no lock behind).
The referee's compile stage sees the cache read-only (its import-time code is the candidate's):
it builds into a private ``staging`` directory, and the trusted side moves finished builds into
the cache with `publish_staged`, never replacing one that exists. In
``load`` mode (the candidate stage, caches read-only) the built module is imported directly and a
missing one is an error: the candidate must build the same sources it built at compile time.

Precompiled header (``build`` mode, g++ only). Parsing ``<torch/extension.h>`` is most of a C++
binding's compile. Torch's own ``use_pch`` writes its ``.gch`` beside torch's headers and deletes
it whenever a candidate passes the default, so the cache keeps its own: per key of (compiler,
torch, the exact C++ flags torch passes for the ``.cpp`` files, ``-DTORCH_EXTENSION_NAME`` aside,
which no torch header mentions) ``<builds>/pch/<key>/torch/extension.h.gch``, found first through
an ``-I`` placed before torch's ``-isystem`` directories. g++ uses it only where the file's first
line of code is ``#include <torch/extension.h>`` (as in every prompted binding) and it was built
with the same settings; anywhere else it parses the header as before, so a PCH changes compile
times, never a result. A new PCH is probed once (``-H`` must report it used) before it is used,
and is published like a build (the compile stage builds it in its staging directory). The PCH key
uses the flags normalised (`normalise_header_flags`): options that cannot change what the header
means (empty strings, ``-v``, warnings, debug info, a repeated ``-std``) are dropped; each ``-O``
level keeps a header of its own (g++ 12 accepts an ``-O2`` header at ``-O1``, the g++ 13 of the
H200 host refuses it); g++ checks each use (``-Winvalid-pch`` reports a refusal, recorded as
``rejected``).

Trusted builds and object reuse. In ``build`` mode with a ``delegate`` (the referee's compile
stage), a ``load_inline`` whose arguments are plain data and whose flags are on an allowlist
(`builder_refusal`) is not compiled in the candidate's process: the request goes to the trusted
side, which runs it in a *builder* (``builder`` mode: a stage that never runs candidate code and
never imports what it builds) and publishes the build; the candidate's stage then loads it. The
builder keeps each translation unit's object in ``<builds>/objects/<key>`` (key: the source text,
the exact compile command's flags, the compiler, torch and CUDA) and, for the next build, copies
an object whose key exists instead of compiling it (the ninja edge becomes a copy), so an
attempt that changes only ``cuda_sources`` recompiles only ``cuda.cu`` and links. An object is
kept only if it depends on nothing but its own source and read-only system, toolkit and torch
headers. Objects are published only from builders: a candidate's import-time code never runs
where objects are made, so it cannot plant one. Anything else (``load`` of files, include paths,
unusual flags) builds in the compile stage as before, without object reuse.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "TRUSTED_DIR", "BuildCache", "BuildError", "build_directory", "build_pch", "builder_refusal", "copy_build",
    "normalise_header_flags", "parse_ptxas", "publish_staged", "trim_compiler_errors",
]

_MARKER = "built.json"
#: Bumped when the way we build changes (flags we add), so old builds are not reused.
_BUILD_RECIPE = "1"
#: Flags we add to every CUDA build: register and spill counts for the feedback.
_PTXAS_VERBOSE = ("-Xptxas=-v",)
_MAX_ERRORS = 6
#: The precompiled header: its directory in the builds cache, its marker, the file g++ looks for.
_PCH_DIR = "pch"
_PCH_MARKER = "pch.json"
_PCH_FILE = ("torch", "extension.h.gch")
#: ``<builds>/pch/disabled`` turns precompiled headers off for that cache (benchmarks, debugging).
_PCH_DISABLED = "disabled"
#: Bumped when the way a PCH is built changes (2: normalised flags).
_PCH_RECIPE = "2"
#: A PCH of torch/extension.h is ~0.8 GB: at most this many flag sets get one.
_PCH_MAX = 8
_PCH_NAME_FLAG = re.compile(r"^-DTORCH_EXTENSION_NAME=")
_FIRST_LINE_PCH = re.compile(r'^\s*#\s*include\s*[<"]torch/extension\.h[>"]')
_CONTEXT_LINES = 3
#: Builds made by the trusted builder: a key space of their own (``<builds>/trusted/<name>-<key>``),
#: published only from builders, so no compile stage can plant one.
TRUSTED_DIR = "trusted"
#: Per-translation-unit objects: their directory in the builds cache, and each entry's files.
_OBJECTS_DIR = "objects"
_OBJECT_FILE = "object.o"
_OBJECT_MARKER = "object.json"
#: Bumped when the way an object's key is computed changes.
_OBJECT_RECIPE = "1"
#: The ninja rule that stands in for a compile whose object is reused.
_REUSE_RULE = "kl_reuse_object"
#: A translation unit that includes torch's headers (or gets them from load_inline's implicit ones).
_TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:torch/|ATen/|c10/|pybind11/)', re.MULTILINE)
#: Added where a PCH is offered: g++ then says when it refuses one (never an error, whatever -Werror).
_PCH_DIAGNOSTICS = ("-Winvalid-pch", "-Wno-error=invalid-pch")
#: g++ found a PCH and refused it (printed because we add -Winvalid-pch where we offer one).
_PCH_REFUSED = re.compile(r"extension\.h\.gch: (?:not used because|created and used with)([^\[\n]*)")

#: load_inline arguments a delegated (trusted) build accepts; any other argument builds in the stage.
_DELEGABLE_KWARGS = frozenset({
    "extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths", "with_cuda",
    "with_pytorch_error_handling", "no_implicit_headers", "is_python_module", "keep_intermediates", "use_pch",
})
#: Flags a delegated build accepts: one token at a time, with no path in it (no ``/``), no response
#: file (``@``) and no shell syntax. Paths (include and library directories, ``-include``), plugins,
#: wrappers, spec files, another host compiler, profile data: the compile stage builds those, as
#: before, without object reuse (a builder must not load code or read files a candidate chose).
_SAFE_FLAG = re.compile(r"^[\w=+.,:\[\]\-]*$")
#: ...except these, whatever their form: they load code into the compiler or linker, or read files.
_UNSAFE_FLAG = re.compile(r"plugin|wrapper|specs|ccbin|compiler-bindir|options-file|optf|profile|^-B|^-include"
                          r"|^-imacros|^-I|^-isystem|^-iquote|^-idirafter|^-L|^-keep|^--keep|^-save-temps|^-o$|^-MF|^-MD|^-MMD")


class BuildError(RuntimeError):
    """An extension failed to build; ``log`` holds the compiler output."""

    def __init__(self, name: str, log: str) -> None:
        self.name = name
        self.log = log
        super().__init__(f"error building extension {name!r}")


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def normalise_header_flags(flags: Sequence[str]) -> list[str]:
    """The flags a precompiled header is keyed and built with: what cannot change the header's
    meaning dropped (empty strings, ``-v``, ``-w``, warnings, debug info, ``-pipe``), the last
    ``-std`` kept, and the last ``-O`` level at the end (``-O`` is ``-O1``, ``-O0`` is no flag at
    all: torch's default). Levels are not merged: g++ 13 refuses a header built at another level.
    Repeated ``-f``/``-m``/``-D`` flags are kept once. g++ still validates every use."""
    kept: list[str] = []
    opt: str | None = None
    std: str | None = None
    seen: set[str] = set()
    skip_next = False
    for flag in (f.strip() for f in flags):
        if skip_next:
            skip_next = False
            continue
        if not flag or flag in ("-v", "-w", "-pipe") or flag.startswith("-g") or flag.startswith("-fdiagnostics"):
            continue
        if flag.startswith("-W") and not flag.startswith(("-Wp,", "-Wa,", "-Wl,")):
            continue
        if flag.startswith(("-Wa,", "-Wl,")):
            continue
        if re.fullmatch(r"-O[0-9sgz]?|-Ofast", flag):
            opt = flag
            continue
        if flag.startswith(("-std=", "--std=")):
            std = "-std=" + flag.split("=", 1)[1]
            continue
        if flag.startswith(("-f", "-m", "-D", "-U")):
            if flag in seen:
                continue
            seen.add(flag)
        kept.append(flag)
    if std is not None:
        kept.append(std)
    if opt is not None and opt != "-O0":
        kept.append("-O1" if opt == "-O" else opt)
    return kept


def _flags_text(normalised: Sequence[str]) -> str:
    """Normalised binding flags as the model reads them."""
    return " ".join(normalised) or "none (torch's default -O0)"


def builder_refusal(kwargs: dict[str, Any]) -> str | None:
    """Why a ``load_inline`` with these keyword arguments cannot be built by the trusted builder
    (None: it can). Refused builds are compiled in the candidate's stage, as before."""
    unknown = sorted(set(kwargs) - _DELEGABLE_KWARGS)
    if unknown:
        return f"argument {unknown[0]!r}"
    if kwargs.get("extra_include_paths"):
        return "extra_include_paths"
    for key in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags"):
        value = kwargs.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            return f"{key} is not a list of strings"
        for flag in value:
            for token in flag.split():
                if _UNSAFE_FLAG.search(token) or not _SAFE_FLAG.match(token):
                    return f"flag {token!r}"
    for key in ("with_cuda", "with_pytorch_error_handling", "no_implicit_headers", "is_python_module",
                "keep_intermediates", "use_pch"):
        if key in kwargs and not isinstance(kwargs[key], (bool, type(None))):
            return f"{key} is not a bool"
    return None


_ERROR_LINE = re.compile(
    r"^(?P<file>[^\s:()]+?)(?::(?P<line>\d+)(?::\d+)?:|\((?P<nvline>\d+)\):)\s*(?:fatal\s+)?error\b",
    re.IGNORECASE,
)


_PATH = re.compile(r"(?:/[^\s:()'\"]+)+/([^/\s:()'\"]+\.(?:cpp|cc|cu|cuh|h|hpp|o|so))")


def trim_compiler_errors(log: str, *, max_errors: int = _MAX_ERRORS) -> str:
    """The first compiler errors, each as ``file:line: message`` plus a few lines of context."""
    lines = [_PATH.sub(r"\1", line) for line in log.splitlines()]
    is_error = [bool(_ERROR_LINE.match(line.strip())) for line in lines]
    total = sum(is_error)
    if not total:  # a linker or ninja failure: keep the tail, which says what went wrong
        return "\n".join([ln for ln in lines if ln.strip()][-15:])
    picked: list[str] = []
    count = 0
    for i, line in enumerate(lines):
        if not is_error[i]:
            continue
        picked.append(line.strip())
        for j in range(i + 1, min(i + 1 + _CONTEXT_LINES, len(lines))):
            if is_error[j]:
                break
            if lines[j].strip():
                picked.append("    " + lines[j].rstrip())
        count += 1
        if count >= max_errors:
            break
    if total > count:
        picked.append(f"[... {total - count} more errors]")
    return "\n".join(picked)


_PTXAS_ENTRY = re.compile(r"ptxas info\s*:\s*Compiling entry function '(?P<fn>[^']+)' for '(?P<arch>[^']+)'")
_PTXAS_PROPS = re.compile(r"ptxas info\s*:\s*Function properties for (?P<fn>\S+)")
_PTXAS_SPILL = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_PTXAS_USED = re.compile(r"ptxas info\s*:\s*Used (?P<regs>\d+) registers(?:.*?(?P<smem>\d+) bytes smem)?")


def parse_ptxas(log: str) -> list[dict[str, Any]]:
    """Per-kernel registers, shared memory, stack and spills from ``ptxas -v`` output."""
    kernels: dict[str, dict[str, Any]] = {}
    current: str | None = None
    props_for: str | None = None
    for line in log.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            current = m.group("fn")
            kernels.setdefault(current, {"kernel": current, "arch": m.group("arch")})
        elif m := _PTXAS_PROPS.search(line):
            props_for = m.group("fn")
            kernels.setdefault(props_for, {"kernel": props_for})
        elif (m := _PTXAS_SPILL.search(line)) and props_for:
            kernels[props_for].update(
                stack_bytes=int(m.group("stack")),
                spill_stores=int(m.group("stores")),
                spill_loads=int(m.group("loads")),
            )
        elif (m := _PTXAS_USED.search(line)) and current:
            kernels[current]["registers"] = int(m.group("regs"))
            if m.group("smem"):
                kernels[current]["smem_bytes"] = int(m.group("smem"))
    return list(kernels.values())


def build_pch(compiler: Sequence[str], flags: Sequence[str], post: Sequence[str], header: Path,
              directory: Path) -> tuple[str, str]:
    """Precompile ``header`` (``.../torch/extension.h``) with these flags into
    ``directory/torch/extension.h.gch`` and check that g++ uses it for a file whose first line
    includes it, compiled with the same flags. Returns ``("built", "")``, or ``("failed" |
    "invalid", why)``: g++ skips an unusable PCH without a word, so ``-H`` must name it first."""
    gch = directory.joinpath(*_PCH_FILE)
    gch.parent.mkdir(parents=True, exist_ok=True)
    built = subprocess.run([*compiler, "-x", "c++-header", *flags, str(header), "-o", str(gch), *post],
                           capture_output=True, text=True, cwd=directory, check=False)
    if built.returncode != 0 or not gch.is_file():
        return "failed", (built.stderr or "")[-300:]
    probe = subprocess.run([*compiler, f"-I{directory}", *flags, "-H", "-fsyntax-only", "-x", "c++", "-", *post],
                           input="#include <torch/extension.h>\n", capture_output=True, text=True,
                           cwd=directory, check=False)
    first = next((ln for ln in probe.stderr.splitlines() if ln.strip()), "")
    if probe.returncode != 0 or first.strip() != f"! {gch}":
        gch.unlink(missing_ok=True)
        return "invalid", first[-300:]
    return "built", ""


_GCC_IDENTITIES: dict[tuple[str, ...], str | None] = {}


def _gcc_identity(compiler: tuple[str, ...]) -> str | None:
    """The compiler's resolved path and ``-v`` banner if it is g++ (PCHs are g++'s), else None."""
    if compiler not in _GCC_IDENTITIES:
        identity = None
        path = shutil.which(compiler[0]) if compiler else None
        if path is not None:
            try:
                out = subprocess.run([*compiler, "-v"], capture_output=True, text=True, timeout=60,
                                     env={**os.environ, "LC_ALL": "C"}, check=False).stderr
            except (OSError, subprocess.SubprocessError):
                out = ""
            version = [ln for ln in out.splitlines() if ln.startswith(("gcc version", "Target:"))]
            if any(ln.startswith("gcc version") for ln in version) and "clang" not in out:
                identity = json.dumps([os.path.realpath(path), *compiler[1:], *version])
        _GCC_IDENTITIES[compiler] = identity
    return _GCC_IDENTITIES[compiler]


def _first_line_includes_torch(path: Path) -> bool:
    """Whether the first line of code in a C++ file is ``#include <torch/extension.h>`` (the only
    place g++ uses a precompiled header)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    for line in text.splitlines():
        line = line.split("//", 1)[0]
        if line.strip():
            return bool(_FIRST_LINE_PCH.match(line))
    return False


@contextlib.contextmanager
def _capture_fd_output() -> Iterator[list[str]]:
    """Capture what the compiler writes to fds 1 and 2 (ninja runs as a subprocess)."""
    box: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(1), os.dup(2)
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield box
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            box.append(tmp.read().decode(errors="replace"))


_IDENTITIES: dict[tuple[str, ...], str] = {}


def _compiler_identity(command: Sequence[str]) -> str:
    """A compiler's resolved path and version banner (part of an object's key)."""
    key = tuple(command)
    if key not in _IDENTITIES:
        path = shutil.which(command[0]) if command else None
        banner = ""
        if path is not None:
            try:
                banner = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60,
                                        env={**os.environ, "LC_ALL": "C"}, check=False).stdout
            except (OSError, subprocess.SubprocessError):
                banner = ""
        _IDENTITIES[key] = json.dumps([os.path.realpath(path) if path else command[0], *command[1:],
                                       banner.strip()[-400:]])
    return _IDENTITIES[key]


def _ninja_steps(build_dir: Path) -> dict[str, float]:
    """Seconds per output of the last build, from ninja's log."""
    steps: dict[str, float] = {}
    log = build_dir / ".ninja_log"
    if log.is_file():
        for line in log.read_text(errors="replace").splitlines():
            parts = line.split("\t")
            if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
                steps[parts[3]] = round((int(parts[1]) - int(parts[0])) / 1e3, 3)
    return steps


def _ninja_deps(build_dir: Path, output: str) -> list[str] | None:
    """The files ninja recorded ``output`` as depending on (its compiler's depfile), or None."""
    try:
        done = subprocess.run(["ninja", "-t", "deps", output], cwd=build_dir, capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines or "(VALID)" not in lines[0]:
        return None
    return [ln.strip() for ln in lines[1:] if ln.strip()]


class BuildCache:
    """Builds or loads candidate extensions by content key.

    Args:
        root: the builds directory.
        mode: ``"build"`` (compile stage), ``"load"`` (candidate stage) or ``"builder"`` (a trusted
            stage that builds delegated requests, reuses and keeps objects, and imports nothing).
        arch_list: ``TORCH_CUDA_ARCH_LIST`` for CUDA builds.
        max_jobs: ninja's parallelism.
        staging: where the compile stage builds what the read-only cache lacks.
        pch: use (and build) precompiled torch headers; ``"use"``: only those already published;
            None: on unless ``<root>/pch/disabled``.
        delegate: (``build`` mode) sends a `builder_refusal`-free ``load_inline`` request to the
            trusted side and returns its answer: ``{"ok": bool, "key": str, "log": str,
            "record": {...}}``; the build it published is then loaded from ``root``.
    """

    def __init__(self, root: Path, *, mode: str, arch_list: str = "9.0a", max_jobs: int = 2,
                 staging: Path | None = None, pch: bool | str | None = None,
                 delegate: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        if mode not in ("build", "load", "builder"):
            raise ValueError(f"mode must be 'build', 'load' or 'builder', not {mode!r}")
        self.root = root
        #: Where missing extensions are built when the cache itself is read-only (the compile
        #: stage): the trusted side publishes them into ``root`` afterwards (`publish_staged`).
        self.staging = staging
        self.mode = mode
        #: Precompiled torch/extension.h for C++ files (build mode); None: on unless the cache
        #: has a ``pch/disabled`` file.
        self.pch = bool(pch) if pch is not None else not (root / _PCH_DIR / _PCH_DISABLED).exists()
        #: ``pch="use"``: use published PCHs, never build one (their building left to trusted stages).
        self.pch_build = pch != "use"
        self.arch_list = arch_list
        self.max_jobs = max_jobs
        self.delegate = delegate if mode == "build" else None
        #: One record per extension requested: name, key, cached, seconds, kernels.
        self.records: list[dict[str, Any]] = []
        self.logs: list[str] = []
        #: Modules handed to the candidate, for the no-op substitution test.
        self.modules: list[ModuleType] = []

    # -- keys ----------------------------------------------------------------------------
    def key(self, name: str, parts: dict[str, Any]) -> str:
        import torch

        material = {
            "recipe": _BUILD_RECIPE,
            "name": name,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "arch": self.arch_list,
            **parts,
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24]

    # -- installation --------------------------------------------------------------------
    def install(self) -> None:
        """Route ``load_inline`` and ``load`` of ``torch.utils.cpp_extension`` through us."""
        from torch.utils import cpp_extension

        self._orig_load_inline = cpp_extension.load_inline
        self._orig_load = cpp_extension.load
        cpp_extension.load_inline = self.load_inline  # type: ignore[assignment]
        cpp_extension.load = self.load  # type: ignore[assignment]
        if self.mode == "builder":
            # A builder builds and never loads: loading runs the library's static initialisers.
            cpp_extension._import_module_from_library = lambda *args, **kwargs: None  # type: ignore[attr-defined]
        os.environ["TORCH_CUDA_ARCH_LIST"] = self.arch_list
        os.environ["MAX_JOBS"] = str(self.max_jobs)

    def load_inline(self, name: str, cpp_sources: Any, cuda_sources: Any = None, functions: Any = None,
                    **kwargs: Any) -> ModuleType:
        kwargs.pop("build_directory", None)
        kwargs.pop("verbose", None)
        parts = {
            "kind": "inline",
            "cpp_sources": _as_list(cpp_sources),
            "cuda_sources": _as_list(cuda_sources),
            "functions": functions if isinstance(functions, (dict, type(None))) else _as_list(functions),
            **{k: (_as_list(v) if isinstance(v, (list, tuple)) else v) for k, v in sorted(kwargs.items())},
        }
        cuda = bool(parts["cuda_sources"])
        request: dict[str, Any] | None = None
        refusal = builder_refusal(kwargs)
        if refusal is None and _plain_data(parts):
            request = {"name": name, "cpp_sources": parts["cpp_sources"], "cuda_sources": parts["cuda_sources"],
                       "functions": parts["functions"], "kwargs": {k: parts[k] for k in kwargs}}

        def build(directory: Path, record: dict[str, Any]) -> ModuleType:
            extra = kwargs.pop("extra_cuda_cflags", None)
            cflags = [*(_as_list(extra)), *(_PTXAS_VERBOSE if cuda else ())]
            record["extra_cflags"] = [f for f in _as_list(kwargs.get("extra_cflags")) if f.strip()]
            with self._ninja_hooks(record):
                return self._orig_load_inline(
                    name, cpp_sources, cuda_sources=cuda_sources, functions=functions,
                    build_directory=str(directory), verbose=True, extra_cuda_cflags=cflags or None, **kwargs,
                )

        return self._get(name, parts, build, request=request, refusal=refusal)

    def build_request(self, request: dict[str, Any]) -> dict[str, Any]:
        """(``builder`` mode) Build one delegated ``load_inline`` request; returns its record.
        The key is computed here from the request, never taken from the candidate's side.

        Raises:
            BuildError: the build failed (``log`` says why).
            ValueError: the request is malformed or not one a builder accepts.
        """
        if self.mode != "builder":
            raise ValueError("build_request needs a builder")
        name, kwargs = request.get("name"), request.get("kwargs")
        if not isinstance(name, str) or not isinstance(kwargs, dict) or builder_refusal(kwargs) is not None:
            raise ValueError("malformed build request")
        sources = [request.get("cpp_sources"), request.get("cuda_sources")]
        if not all(isinstance(s, list) and all(isinstance(x, str) for x in s) for s in sources):
            raise ValueError("malformed build request: sources must be lists of strings")
        functions = request.get("functions")
        self.load_inline(name, sources[0], cuda_sources=sources[1] or None, functions=functions, **kwargs)
        return self.records[-1]

    def load(self, name: str, sources: Any, **kwargs: Any) -> ModuleType:
        kwargs.pop("build_directory", None)
        kwargs.pop("verbose", None)
        paths = _as_list(sources)
        contents = []
        for path in paths:
            contents.append(Path(path).read_text())
        parts = {
            "kind": "files",
            "sources": contents,
            "names": [os.path.basename(p) for p in paths],
            **{k: (_as_list(v) if isinstance(v, (list, tuple)) else v) for k, v in sorted(kwargs.items())},
        }
        cuda = any(p.endswith((".cu", ".cuh")) for p in paths)

        def build(directory: Path, record: dict[str, Any]) -> ModuleType:
            extra = kwargs.pop("extra_cuda_cflags", None)
            cflags = [*(_as_list(extra)), *(_PTXAS_VERBOSE if cuda else ())]
            record["extra_cflags"] = [f for f in _as_list(kwargs.get("extra_cflags")) if f.strip()]
            with self._ninja_hooks(record):
                return self._orig_load(name, paths, build_directory=str(directory), verbose=True,
                                       extra_cuda_cflags=cflags or None, **kwargs)

        return self._get(name, parts, build, refusal="load() of source files")

    # -- the ninja file: precompiled header and reused objects ----------------------------
    @contextlib.contextmanager
    def _ninja_hooks(self, record: dict[str, Any]) -> Iterator[None]:
        """While torch writes the build's ninja file, put a matching PCH's directory first on the
        C++ compile's include path (building the PCH if allowed and the cache has none for these
        flags) and, in a builder, turn the compile of every translation unit whose object is in the
        cache into a copy of it."""
        from torch.utils import cpp_extension

        original = getattr(cpp_extension, "_write_ninja_file", None)
        if original is None:  # another torch: no PCH, no reuse, nothing else changes
            record["pch"] = {"status": "unsupported"}
            yield
            return
        use_pch = self.mode in ("build", "builder") and self.pch
        if not use_pch:
            record["pch"] = {"status": "off"}

        def write(*args: Any, **kwargs: Any) -> Any:
            cflags, sources = kwargs.get("cflags"), kwargs.get("sources")
            cpp = [s for s in sources or () if str(s).endswith((".cpp", ".cc", ".cxx"))]
            if args or not isinstance(cflags, list):
                record["pch"] = {"status": "unsupported"}
                return original(*args, **kwargs)
            if use_pch and not cpp:
                record["pch"] = {"status": "no_cpp"}
            elif use_pch:
                try:
                    include = self._pch_include(cflags, list(kwargs.get("post_cflags") or []), record)
                except Exception as exc:  # noqa: BLE001 - a PCH is an optimisation: build without it
                    record["pch"] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:300]}
                    include = None
                if include is not None:
                    if not all(_first_line_includes_torch(Path(s)) for s in cpp):
                        record["pch"].update(status="not_first_include",
                                             reason="the binding's first line of code is not "
                                                    "#include <torch/extension.h>")
                    # g++ says why it refuses an offered header (a warning, also under -Werror).
                    kwargs["cflags"] = [f"-I{shlex.quote(str(include))}", *cflags, *_PCH_DIAGNOSTICS]
            result = original(*args, **kwargs)
            if self.mode == "builder":
                self._reuse_objects(kwargs, record)
            return result

        cpp_extension._write_ninja_file = write
        try:
            yield
        finally:
            cpp_extension._write_ninja_file = original

    def _known_headers(self) -> list[str]:
        """The binding flags of the published PCHs, as the feedback shows them."""
        known = []
        for marker in sorted((self.root / _PCH_DIR).glob(f"*/{_PCH_MARKER}")):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                extra = json.loads(marker.read_text()).get("extra")
                if isinstance(extra, list):
                    known.append(_flags_text(extra))
        return sorted(set(known))

    def _pch_include(self, cflags: list[str], post_cflags: list[str], record: dict[str, Any]) -> Path | None:
        """The directory holding ``torch/extension.h.gch`` for these flags, or None."""
        from torch.utils import cpp_extension

        compiler = shlex.split(cpp_extension.get_cxx_compiler())
        identity = _gcc_identity(tuple(compiler))
        if identity is None:
            record["pch"] = {"status": "not_gcc", "reason": "the host compiler is not g++"}
            return None
        flags = normalise_header_flags([f for f in shlex.split(" ".join(cflags)) if not _PCH_NAME_FLAG.match(f)])
        post = normalise_header_flags(shlex.split(" ".join(post_cflags)))
        extra = normalise_header_flags(record.get("extra_cflags", []))
        header = Path(cpp_extension._TORCH_PATH) / "include" / "torch" / "extension.h"
        import torch

        material = {"recipe": _PCH_RECIPE, "compiler": identity, "flags": flags, "post": post,
                    "torch": torch.__version__, "header": str(header), "mtime": header.stat().st_mtime_ns}
        key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24]
        record["pch"] = {"key": key, "status": "used", "seconds": 0.0, "flags": extra}
        published = self.root / _PCH_DIR / key
        if (published / _PCH_MARKER).is_file():
            return published
        if not self.pch_build:
            known = self._known_headers()
            record["pch"].update(status="missing", reason=(
                f"no precompiled torch header for binding flags {_flags_text(extra)}"
                + (f"; prepared: {'; '.join(known)}" if known else "; none prepared yet")))
            return None
        pch_root = (self.staging or self.root) / _PCH_DIR
        existing = [p for p in (self.root / _PCH_DIR).glob("*") if p.is_dir() and not p.name.startswith(".")] \
            if (self.root / _PCH_DIR).is_dir() else []
        if len(existing) >= _PCH_MAX:
            record["pch"].update(status="full", reason=f"the cache holds its maximum of {_PCH_MAX} headers")
            return None
        target = pch_root / key
        pch_root.mkdir(parents=True, exist_ok=True)
        with open(pch_root / f".{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (target / _PCH_MARKER).is_file():  # built by a concurrent build while we waited
                return target
            started = time.perf_counter()
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=pch_root))
            tmp.chmod(0o755)  # like a build directory (mkdtemp makes it private)
            try:
                status, detail = build_pch(compiler, flags, post, header, tmp)
                if status != "built":
                    record["pch"].update(status=status, error=detail)
                    return None
                seconds = round(time.perf_counter() - started, 3)
                tmp.joinpath(_PCH_MARKER).write_text(json.dumps({"key": key, "seconds": seconds, "extra": extra,
                                                                 **material}))
                os.rename(tmp, target)
                record["pch"].update(status="built", seconds=seconds)
                return target
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

    def _object_key(self, rule: str, flags: list[str], source: Path, build_dir: Path) -> tuple[str, str]:
        """An object's key (and its source text): the text, the compile's flags (the build
        directory's path taken out), the compiler, torch, CUDA and the target arch."""
        import torch
        from torch.utils import cpp_extension

        text = source.read_text(errors="replace")
        if rule == "cuda_compile":
            nvcc = os.environ.get("PYTORCH_NVCC") or cpp_extension._join_cuda_home("bin", "nvcc")
            compiler = _compiler_identity(shlex.split(nvcc))
        else:
            compiler = _compiler_identity(shlex.split(cpp_extension.get_cxx_compiler()))
        tokens = shlex.split(" ".join(flags).replace(str(build_dir), "<build>"))
        if "TORCH_EXTENSION_NAME" not in text:  # the name matters only to code that uses it
            tokens = [t for t in tokens if not _PCH_NAME_FLAG.match(t)]
        material = {"recipe": _OBJECT_RECIPE, "rule": rule, "compiler": compiler, "flags": tokens, "source": text,
                    "torch": torch.__version__, "cuda": torch.version.cuda, "arch": self.arch_list}
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24], text

    def _reuse_objects(self, ninja: dict[str, Any], record: dict[str, Any]) -> None:
        """(builder) Key every translation unit; rewrite the compile of each whose object the cache
        holds into a copy of it. ``record["objects"]`` lists them, with what `_keep_objects` needs."""
        from torch.utils import cpp_extension

        path = Path(ninja["path"])
        build_dir = path.parent
        text = path.read_text()
        units = []
        reused = []
        for source, obj in zip(ninja.get("sources") or (), ninja.get("objects") or (), strict=False):
            cuda = bool(ninja.get("with_cuda")) and cpp_extension._is_cuda_file(str(source))
            rule = "cuda_compile" if cuda else "compile"
            flags = [*(ninja.get("cuda_cflags") or ()), *(ninja.get("cuda_post_cflags") or ())] if cuda else \
                [*(ninja.get("cflags") or ()), *(ninja.get("post_cflags") or ())]
            key, source_text = self._object_key(rule, [str(f) for f in flags], Path(source), build_dir)
            stored = self.root / _OBJECTS_DIR / key
            unit = {"source": os.path.basename(str(source)), "object": str(obj), "key": key, "rule": rule,
                    "reused": False, "torch_headers": bool(_TORCH_INCLUDE.search(source_text)),
                    "flags": [str(f) for f in flags]}
            line = f"build {obj}: {rule} {os.path.abspath(str(source))}"
            if (stored / _OBJECT_MARKER).is_file() and (stored / _OBJECT_FILE).is_file() and line in text:
                text = text.replace(line, f"build {obj}: {_REUSE_RULE} {stored / _OBJECT_FILE}")
                unit["reused"] = True
                with contextlib.suppress(OSError, ValueError):
                    info = json.loads((stored / _OBJECT_MARKER).read_text())
                    unit["kernels"] = info.get("kernels", [])
                    unit["first_seconds"] = info.get("seconds")
                reused.append(unit)
            units.append(unit)
        if reused:  # ninja wants a rule defined before the first build statement using it
            head, _, rest = text.partition("\n")
            path.write_text(f"{head}\n\nrule {_REUSE_RULE}\n  command = cp $in $out\n\n{rest}")
        record["objects"] = units

    def _keep_objects(self, directory: Path, record: dict[str, Any], log: str) -> None:
        """(builder) Stage every object compiled in this build whose only dependencies are its own
        source and read-only headers (system, toolkit, torch, the published PCHs), for the trusted
        side to publish; note each unit's seconds and (CUDA) ptxas figures."""
        steps = _ninja_steps(directory)
        compiled_cuda = [u for u in record.get("objects", []) if u["rule"] == "cuda_compile" and not u["reused"]]
        kernels = parse_ptxas(log)
        for unit in record.get("objects", []):
            unit["seconds"] = steps.get(unit["object"], 0.0)
            if unit["reused"]:
                continue
            if unit["rule"] == "cuda_compile" and len(compiled_cuda) == 1:
                unit["kernels"] = kernels
            reason = self._untrusted_input(directory, unit)
            if reason is not None:
                unit["kept"] = reason
                continue
            target = (self.staging or self.root) / _OBJECTS_DIR / unit["key"]
            if target.exists() or (self.root / _OBJECTS_DIR / unit["key"]).exists():
                continue
            tmp = target.parent / f".{unit['key']}.{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            shutil.copy2(directory / unit["object"], tmp / _OBJECT_FILE)
            (tmp / _OBJECT_MARKER).write_text(json.dumps({
                "key": unit["key"], "source": unit["source"], "rule": unit["rule"], "seconds": unit["seconds"],
                "kernels": unit.get("kernels", [])}))
            os.rename(tmp, target)
            unit["kept"] = "stored"

    def _untrusted_input(self, directory: Path, unit: dict[str, Any]) -> str | None:
        """Why an object cannot be kept for reuse (something besides its key went into it), or None."""
        import sysconfig

        import torch
        from torch.utils import cpp_extension

        deps = _ninja_deps(directory, unit["object"])
        if deps is None:
            return "no dependency record"
        trusted = [Path(p).resolve() for p in (
            Path(torch.__file__).parent, cpp_extension.CUDA_HOME or "/nonexistent", "/usr",
            sysconfig.get_paths()["include"], sys.prefix, sys.base_prefix, self.root / _PCH_DIR)]
        builds = self.root.resolve()
        own = (directory / unit["source"]).resolve()
        for dep in deps:
            path = (directory / dep).resolve()
            if path == own:
                continue
            inside_pch = path.is_relative_to((self.root / _PCH_DIR).resolve())
            if path.is_relative_to(builds) and not inside_pch:
                return f"depends on {dep}"
            if not any(path.is_relative_to(t) for t in trusted):
                return f"depends on {dep}"
        return None

    # -- build or load -------------------------------------------------------------------
    def _get(self, name: str, parts: dict[str, Any], build: Any, *, request: dict[str, Any] | None = None,
             refusal: str | None = None) -> ModuleType:
        if not name.isidentifier():
            raise ValueError(f"extension name {name!r} must be a Python identifier")
        key = self.key(name, parts)
        # What the builder builds lives in its own key space; the rest (and the candidate stage's
        # copies, laid out flat) in the cache's top level.
        trusted = (request is not None and self.delegate is not None) or self.mode == "builder" or (
            self.mode == "load" and (self.root / TRUSTED_DIR / f"{name}-{key}" / _MARKER).is_file())
        directory = (self.root / TRUSTED_DIR if trusted else self.root) / f"{name}-{key}"
        marker = directory / _MARKER
        record: dict[str, Any] = {"name": name, "key": key, "cached": marker.exists(), "seconds": 0.0}
        if self.mode == "build" and self.delegate is not None:
            # Where the build is (or will be): the referee copies it from there for the candidate.
            record["via"] = "builder" if trusted else "stage"
        self.records.append(record)
        if self.mode == "load" or (marker.exists() and self.mode == "build"):
            if not marker.exists():
                raise RuntimeError(
                    f"extension {name!r} was not built at compile time: its sources or flags "
                    "must not depend on anything that changes between the compile and the run"
                )
            return self._get_built(name, directory, record)
        if self.mode == "builder" and marker.exists():
            return None  # type: ignore[return-value]  # published meanwhile: nothing to build
        if self.mode == "build" and self.delegate is not None:
            if request is not None:
                return self._delegated(name, key, request, record)
            record["builder_refusal"] = refusal or "arguments that are not plain data"
        if self.staging is not None:
            directory = self.staging / f"{name}-{key}"
            marker = directory / _MARKER
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / ".kl-lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the kernel releases it if we are killed
            if marker.exists():  # built by a concurrent compile while we waited
                record["cached"] = True
                if self.mode == "builder":
                    return None  # type: ignore[return-value]
                return self._get_built(name, directory, record)
            with contextlib.suppress(FileNotFoundError):
                (directory / "lock").unlink()  # torch's baton, left behind by a killed build
            started = time.perf_counter()
            module: ModuleType | None = None
            failure = ""
            with _capture_fd_output() as box:
                try:
                    module = build(directory, record)
                except Exception as exc:  # noqa: BLE001 - the log says why; reported as BuildError
                    failure = f"{type(exc).__name__}: {exc}"
            log = (box[0] if box else "") + (f"\n{failure}" if failure else "")
            self.logs.append(log)
            record["seconds"] = round(time.perf_counter() - started, 3)
            if failure or (module is None and self.mode != "builder"):
                raise BuildError(name, log)
            self._note_refused_pch(record, log)
            if self.mode == "builder":
                self._keep_objects(directory, record, log)
                kernels = [k for u in record.get("objects", []) for k in u.get("kernels", [])]
            else:
                kernels = parse_ptxas(log)
            record["kernels"] = kernels
            marker.write_text(json.dumps({"name": name, "module_file": f"{name}.so", "kernels": kernels}))
        if self.mode == "builder":
            return None  # type: ignore[return-value]
        assert module is not None
        self.modules.append(module)
        return module

    @staticmethod
    def _note_refused_pch(record: dict[str, Any], log: str) -> None:
        """g++ found the offered PCH and did not use it (``-Winvalid-pch``): say so, and why."""
        match = _PCH_REFUSED.search(log)
        pch = record.get("pch")
        if match and isinstance(pch, dict) and pch.get("status") in ("used", "built"):
            pch.update(status="rejected", reason=f"g++ did not use the precompiled header:{match.group(1).rstrip()}")

    def _delegated(self, name: str, key: str, request: dict[str, Any], record: dict[str, Any]) -> ModuleType:
        """Have the trusted side build ``request``, then load what it published."""
        assert self.delegate is not None
        record["via"] = "builder"
        answer = self.delegate(request)
        built = answer.get("record") if isinstance(answer.get("record"), dict) else {}
        record["seconds"] = float(built.get("seconds") or answer.get("seconds") or 0.0)
        for field_name in ("pch", "objects", "kernels"):
            if field_name in built:
                record[field_name] = built[field_name]
        if not answer.get("ok"):
            log = str(answer.get("log") or "")
            self.logs.append(log)
            raise BuildError(name, log)
        directory = self.root / TRUSTED_DIR / f"{name}-{key}"
        if answer.get("key") != key or not (directory / _MARKER).is_file():
            raise RuntimeError(f"the trusted build of extension {name!r} was not published")
        record["cached"] = bool(built.get("cached", False))
        return self._get_built(name, directory, record)

    def _get_built(self, name: str, directory: Path, record: dict[str, Any]) -> ModuleType:
        info = json.loads((directory / _MARKER).read_text())
        record.setdefault("kernels", info.get("kernels", []))
        if info.get("module_file") != f"{name}.so":  # a marker must not point outside its build
            raise RuntimeError(f"corrupt build of extension {name!r}: unexpected module file")
        module = self._import(name, directory / info["module_file"])
        self.modules.append(module)
        return module

    @staticmethod
    def _import(name: str, path: Path) -> ModuleType:
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
        if spec is None:
            raise RuntimeError(f"cannot load extension {name!r} from {path}")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        return module


def _plain_data(value: Any) -> bool:
    """Whether ``value`` is JSON-shaped (it can travel to the builder unchanged)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain_data(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_data(v) for k, v in value.items())
    return False


_BUILD_DIR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*-[0-9a-f]{24}$")
_PCH_KEY = re.compile(r"^[0-9a-f]{24}$")


def publish_staged(staging: Path, root: Path, *, pch: bool = True, objects: bool = False,
                   trusted: bool = False) -> list[str]:
    """Move finished builds (and precompiled headers) from a compile stage's staging directory into the cache.

    Runs on the trusted side after the stage has exited. A build is published only if its
    directory name is a build key, it has a marker and holds no symbolic links, and no build of
    that key exists yet: published builds are never replaced, so no stage can overwrite another
    extension's library or marker. A precompiled header (``pch/<key>``) likewise, if it holds
    exactly its marker and ``torch/extension.h.gch`` and the cache has room for another, unless
    ``pch`` is False (a stage that ran candidate code could have planted one: see the compile
    role's ``pch_warmup`` for PCHs built by trusted code only). Objects (``objects/<key>``, exactly
    its object and marker) only with ``objects`` True: from a builder, which runs no candidate code.
    Returns the names published.
    """
    published: list[str] = []
    if not staging.is_dir():
        return published
    root.mkdir(parents=True, exist_ok=True)
    builds_root = root / TRUSTED_DIR if trusted else root
    builds_root.mkdir(exist_ok=True)
    for entry in sorted(staging.iterdir()):
        if entry.is_symlink() or not entry.is_dir() or not _BUILD_DIR_NAME.match(entry.name):
            continue
        if not (entry / _MARKER).is_file() or any(p.is_symlink() for p in entry.rglob("*")):
            continue
        if not trusted and (root / TRUSTED_DIR / entry.name).exists():
            continue  # the builder built this key: a compile stage's build of it can only be a plant
        if _move_new(entry, builds_root / entry.name):
            published.append(f"{TRUSTED_DIR}/{entry.name}" if trusted else entry.name)
    staged_pch = staging / _PCH_DIR
    if pch and staged_pch.is_dir() and not staged_pch.is_symlink():
        pch_root = root / _PCH_DIR
        pch_root.mkdir(exist_ok=True)
        for entry in sorted(staged_pch.iterdir()):
            if entry.is_symlink() or not entry.is_dir() or not _PCH_KEY.match(entry.name):
                continue
            paths = list(entry.rglob("*"))
            if any(p.is_symlink() for p in paths) or sorted(p.relative_to(entry).as_posix() for p in paths) != \
                    sorted([_PCH_MARKER, _PCH_FILE[0], "/".join(_PCH_FILE)]):
                continue
            if sum(1 for p in pch_root.iterdir() if p.is_dir() and _PCH_KEY.match(p.name)) >= _PCH_MAX:
                break
            if _move_new(entry, pch_root / entry.name):
                published.append(f"{_PCH_DIR}/{entry.name}")
    staged_objects = staging / _OBJECTS_DIR
    if objects and staged_objects.is_dir() and not staged_objects.is_symlink():
        objects_root = root / _OBJECTS_DIR
        objects_root.mkdir(exist_ok=True)
        for entry in sorted(staged_objects.iterdir()):
            if entry.is_symlink() or not entry.is_dir() or not _PCH_KEY.match(entry.name):
                continue
            paths = list(entry.iterdir())
            if any(p.is_symlink() or not p.is_file() for p in paths) or \
                    sorted(p.name for p in paths) != sorted([_OBJECT_FILE, _OBJECT_MARKER]):
                continue
            if _move_new(entry, objects_root / entry.name):
                published.append(f"{_OBJECTS_DIR}/{entry.name}")
    return published


def build_directory(root: Path, name: str, key: str, *, trusted: bool) -> Path:
    """Where the cache ``root`` keeps extension ``name``'s build ``key``: among the builder's
    builds (``trusted``) or the compile stages'. Never one for the other: a stage's build of a key
    could be a candidate's plant, and must not stand in for the builder's."""
    return (root / TRUSTED_DIR if trusted else root) / f"{name}-{key}"


def copy_build(root: Path, name: str, key: str, target_root: Path, *, trusted: bool) -> None:
    """Copy what loading extension ``name``'s build ``key`` needs (its marker and library) from the
    cache ``root`` (the builder's build if ``trusted``, else the compile stage's) into
    ``target_root``, laid out as a cache (a candidate stage's own builds)."""
    built, copy = build_directory(root, name, key, trusted=trusted), target_root / f"{name}-{key}"
    copy.mkdir(parents=True, exist_ok=True)
    for file in (_MARKER, f"{name}.so"):
        if (built / file).is_file():
            shutil.copy2(built / file, copy / file)


def _move_new(entry: Path, target: Path) -> bool:
    """Move a directory to ``target`` unless one is there already (the first one stays)."""
    if target.exists():
        return False  # built meanwhile by another compile: the first build stays
    tmp = target.parent / f".{entry.name}.{os.getpid()}.{time.monotonic_ns()}"
    try:
        os.rename(entry, tmp)  # same file system: atomic
    except OSError:
        shutil.copytree(entry, tmp)
    try:
        os.rename(tmp, target)  # fails if a concurrent publish won the race
        return True
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
