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
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["BuildCache", "BuildError", "parse_ptxas", "publish_staged", "trim_compiler_errors"]

_MARKER = "built.json"
#: Bumped when the way we build changes (flags we add), so old builds are not reused.
_BUILD_RECIPE = "1"
#: Flags we add to every CUDA build: register and spill counts for the feedback.
_PTXAS_VERBOSE = ("-Xptxas=-v",)
_MAX_ERRORS = 6
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
    """

    def __init__(self, root: Path, *, mode: str, arch_list: str = "9.0a", max_jobs: int = 2,
                 staging: Path | None = None) -> None:
        if mode not in ("build", "load"):
            raise ValueError(f"mode must be 'build' or 'load', not {mode!r}")
        self.root = root
        #: Where missing extensions are built when the cache itself is read-only (the compile
        #: stage): the trusted side publishes them into ``root`` afterwards (`publish_staged`).
        self.staging = staging
        self.mode = mode
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

        def build(directory: Path) -> ModuleType:
            extra = kwargs.pop("extra_cuda_cflags", None)
            cflags = [*(_as_list(extra)), *(_PTXAS_VERBOSE if cuda else ())]
            return self._orig_load_inline(
                name, cpp_sources, cuda_sources=cuda_sources, functions=functions, build_directory=str(directory),
                verbose=True, extra_cuda_cflags=cflags or None, **kwargs,
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

        def build(directory: Path) -> ModuleType:
            extra = kwargs.pop("extra_cuda_cflags", None)
            cflags = [*(_as_list(extra)), *(_PTXAS_VERBOSE if cuda else ())]
            return self._orig_load(name, paths, build_directory=str(directory), verbose=True,
                                   extra_cuda_cflags=cflags or None, **kwargs)

        return self._get(name, parts, build)

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
                    module = build(directory)
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


def publish_staged(staging: Path, root: Path) -> list[str]:
    """Move finished builds from a compile stage's staging directory into the cache.

    Runs on the trusted side after the stage has exited. A build is published only if its
    directory name is a build key, it has a marker and holds no symbolic links, and no build of
    that key exists yet: published builds are never replaced, so no stage can overwrite another
    extension's library or marker. Returns the names published.
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
        target = root / entry.name
        if target.exists():
            continue  # built meanwhile by another compile: the first build stays
        tmp = root / f".{entry.name}.{os.getpid()}.{time.monotonic_ns()}"
        try:
            os.rename(entry, tmp)  # same file system: atomic
        except OSError:
            shutil.copytree(entry, tmp)
        try:
            os.rename(tmp, target)  # fails if a concurrent publish won the race
            published.append(entry.name)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return published
