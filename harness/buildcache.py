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
and is published like a build (the compile stage builds it in its staging directory).
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
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "BuildCache", "BuildError", "build_pch", "copy_build", "parse_ptxas", "publish_staged", "trim_compiler_errors",
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
#: Bumped when the way a PCH is built changes.
_PCH_RECIPE = "1"
#: A PCH of torch/extension.h is ~0.8 GB: at most this many flag sets get one.
_PCH_MAX = 8
_PCH_NAME_FLAG = re.compile(r"^-DTORCH_EXTENSION_NAME=")
_FIRST_LINE_PCH = re.compile(r'^\s*#\s*include\s*[<"]torch/extension\.h[>"]')
_CONTEXT_LINES = 3


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


class BuildCache:
    """Builds or loads candidate extensions by content key.

    Args:
        root: the builds directory.
        mode: ``"build"`` (compile stage) or ``"load"`` (candidate stage).
        arch_list: ``TORCH_CUDA_ARCH_LIST`` for CUDA builds.
        max_jobs: ninja's parallelism.
        staging: where the compile stage builds what the read-only cache lacks.
        pch: use (and build) precompiled torch headers; ``"use"``: only those already published;
            None: on unless ``<root>/pch/disabled``.
    """

    def __init__(self, root: Path, *, mode: str, arch_list: str = "9.0a", max_jobs: int = 2,
                 staging: Path | None = None, pch: bool | str | None = None) -> None:
        if mode not in ("build", "load"):
            raise ValueError(f"mode must be 'build' or 'load', not {mode!r}")
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

        def build(directory: Path, record: dict[str, Any]) -> ModuleType:
            extra = kwargs.pop("extra_cuda_cflags", None)
            cflags = [*(_as_list(extra)), *(_PTXAS_VERBOSE if cuda else ())]
            with self._precompiled_header(record):
                return self._orig_load_inline(
                    name, cpp_sources, cuda_sources=cuda_sources, functions=functions,
                    build_directory=str(directory), verbose=True, extra_cuda_cflags=cflags or None, **kwargs,
                )

        return self._get(name, parts, build)

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
            with self._precompiled_header(record):
                return self._orig_load(name, paths, build_directory=str(directory), verbose=True,
                                       extra_cuda_cflags=cflags or None, **kwargs)

        return self._get(name, parts, build)

    # -- precompiled header --------------------------------------------------------------
    @contextlib.contextmanager
    def _precompiled_header(self, record: dict[str, Any]) -> Iterator[None]:
        """While torch writes the build's ninja file, put a matching PCH's directory first on the
        C++ compile's include path (building the PCH if the cache has none for these flags)."""
        if self.mode != "build" or not self.pch:
            record["pch"] = {"status": "off"}
            yield
            return
        from torch.utils import cpp_extension

        original = getattr(cpp_extension, "_write_ninja_file", None)
        if original is None:  # another torch: no PCH, nothing else changes
            record["pch"] = {"status": "unsupported"}
            yield
            return

        def write(*args: Any, **kwargs: Any) -> Any:
            cflags, sources = kwargs.get("cflags"), kwargs.get("sources")
            cpp = [s for s in sources or () if str(s).endswith((".cpp", ".cc", ".cxx"))]
            if args or not isinstance(cflags, list) or not cpp:
                record["pch"] = {"status": "no_cpp" if not cpp else "unsupported"}
                return original(*args, **kwargs)
            try:
                include = self._pch_include(cflags, list(kwargs.get("post_cflags") or []), record)
            except Exception as exc:  # noqa: BLE001 - a PCH is an optimisation: build without it
                record["pch"] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:300]}
                include = None
            if include is not None:
                firsts = [_first_line_includes_torch(Path(s)) for s in cpp]
                record["pch"]["status"] = record["pch"]["status"] if all(firsts) else "not_first_include"
                kwargs["cflags"] = [f"-I{shlex.quote(str(include))}", *cflags]
            return original(*args, **kwargs)

        cpp_extension._write_ninja_file = write
        try:
            yield
        finally:
            cpp_extension._write_ninja_file = original

    def _pch_include(self, cflags: list[str], post_cflags: list[str], record: dict[str, Any]) -> Path | None:
        """The directory holding ``torch/extension.h.gch`` for these flags, or None."""
        from torch.utils import cpp_extension

        compiler = shlex.split(cpp_extension.get_cxx_compiler())
        identity = _gcc_identity(tuple(compiler))
        if identity is None:
            record["pch"] = {"status": "not_gcc"}
            return None
        flags = [f for f in shlex.split(" ".join(cflags)) if not _PCH_NAME_FLAG.match(f)]
        post = shlex.split(" ".join(post_cflags))
        header = Path(cpp_extension._TORCH_PATH) / "include" / "torch" / "extension.h"
        import torch

        material = {"recipe": _PCH_RECIPE, "compiler": identity, "flags": flags, "post": post,
                    "torch": torch.__version__, "header": str(header), "mtime": header.stat().st_mtime_ns}
        key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24]
        record["pch"] = {"key": key, "status": "used", "seconds": 0.0}
        published = self.root / _PCH_DIR / key
        if (published / _PCH_MARKER).is_file():
            return published
        if not self.pch_build:
            record["pch"]["status"] = "missing"
            return None
        pch_root = (self.staging or self.root) / _PCH_DIR
        existing = [p for p in (self.root / _PCH_DIR).glob("*") if p.is_dir() and not p.name.startswith(".")] \
            if (self.root / _PCH_DIR).is_dir() else []
        if len(existing) >= _PCH_MAX:
            record["pch"]["status"] = "full"
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
                tmp.joinpath(_PCH_MARKER).write_text(json.dumps({"key": key, "seconds": seconds, **material}))
                os.rename(tmp, target)
                record["pch"].update(status="built", seconds=seconds)
                return target
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

    # -- build or load -------------------------------------------------------------------
    def _get(self, name: str, parts: dict[str, Any], build: Any) -> ModuleType:
        if not name.isidentifier():
            raise ValueError(f"extension name {name!r} must be a Python identifier")
        key = self.key(name, parts)
        directory = self.root / f"{name}-{key}"
        marker = directory / _MARKER
        record: dict[str, Any] = {"name": name, "key": key, "cached": marker.exists(), "seconds": 0.0}
        self.records.append(record)
        if self.mode == "load" or marker.exists():
            if not marker.exists():
                raise RuntimeError(
                    f"extension {name!r} was not built at compile time: its sources or flags "
                    "must not depend on anything that changes between the compile and the run"
                )
            return self._get_built(name, directory, record)
        if self.staging is not None:
            directory = self.staging / f"{name}-{key}"
            marker = directory / _MARKER
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / ".kl-lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the kernel releases it if we are killed
            if marker.exists():  # built by a concurrent compile while we waited
                record["cached"] = True
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
            if module is None:
                raise BuildError(name, log)
            kernels = parse_ptxas(log)
            record["kernels"] = kernels
            marker.write_text(json.dumps({"name": name, "module_file": f"{name}.so", "kernels": kernels}))
        self.modules.append(module)
        return module

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


_BUILD_DIR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*-[0-9a-f]{24}$")
_PCH_KEY = re.compile(r"^[0-9a-f]{24}$")


def publish_staged(staging: Path, root: Path, *, pch: bool = True) -> list[str]:
    """Move finished builds (and precompiled headers) from a compile stage's staging directory into the cache.

    Runs on the trusted side after the stage has exited. A build is published only if its
    directory name is a build key, it has a marker and holds no symbolic links, and no build of
    that key exists yet: published builds are never replaced, so no stage can overwrite another
    extension's library or marker. A precompiled header (``pch/<key>``) likewise, if it holds
    exactly its marker and ``torch/extension.h.gch`` and the cache has room for another, unless
    ``pch`` is False (a stage that ran candidate code could have planted one: see the compile
    role's ``pch_warmup`` for PCHs built by trusted code only). Returns the names published.
    """
    published: list[str] = []
    if not staging.is_dir():
        return published
    root.mkdir(parents=True, exist_ok=True)
    for entry in sorted(staging.iterdir()):
        if entry.is_symlink() or not entry.is_dir() or not _BUILD_DIR_NAME.match(entry.name):
            continue
        if not (entry / _MARKER).is_file() or any(p.is_symlink() for p in entry.rglob("*")):
            continue
        if _move_new(entry, root / entry.name):
            published.append(entry.name)
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
    return published


def copy_build(root: Path, name: str, key: str, target_root: Path) -> None:
    """Copy what loading extension ``name``'s build ``key`` needs (its marker and library) from the
    cache ``root`` into ``target_root``, laid out as a cache (a candidate stage's own builds)."""
    built, copy = root / f"{name}-{key}", target_root / f"{name}-{key}"
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
