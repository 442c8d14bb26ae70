"""`BuildCache`: builds or loads candidate extensions by content key."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.buildcache.compiler import BuildError, _capture_fd_output, parse_ptxas
from harness.buildcache.flags import _as_list, _plain_data, builder_refusal
from harness.buildcache.layout import (
    _BUILD_RECIPE,
    _MARKER,
    _PCH_DIR,
    _PCH_DISABLED,
    _PTXAS_VERBOSE,
    TRUSTED_DIR,
)
from harness.buildcache.ninja import _NinjaHooks
from harness.buildcache.records import BuildAnswer, BuildRecord
from harness.protocol.build import Delegation
from vocabulary.builds import BuildPhase, KernelInfo
from vocabulary.wire import JsonObject, Reader, WireError, as_json

#: Builds one extension into a directory, filling in its record; returns the module (a builder: None).
_Build = Callable[[Path, BuildRecord], ModuleType]


class BuildCache(_NinjaHooks):
    """Builds or loads candidate extensions by content key.

    Args:
        root: the builds directory.
        mode: ``"build"`` (compile sandbox), ``"load"`` (candidate sandbox) or ``"builder"`` (a trusted
            sandbox that builds delegated requests, reuses and keeps objects, and imports nothing).
        arch_list: ``TORCH_CUDA_ARCH_LIST`` for CUDA builds.
        max_jobs: ninja's parallelism.
        staging: where the compile sandbox builds what the read-only cache lacks.
        pch: use (and build) precompiled torch headers; ``"use"``: only those already published;
            None: on unless ``<root>/pch/disabled``.
        delegate: sends a build to the trusted side and returns its `BuildAnswer`. ``build`` mode
            (the compile sandbox): each `builder_refusal`-free ``load_inline`` request (plain data);
            the build it published is then loaded from ``root``. ``load`` mode (the candidate
            sandbox): each build missing from ``root`` (a lazy build, refused ones included, to be
            told why); the trusted side copies what it built into ``root``.
        on_module: called with each extension module before it is handed to the candidate (the
            candidate sandbox wraps its functions: `harness.sandboxed.roles.candidate.NoopSwitch`).
    """

    def __init__(self, root: Path, *, mode: str, arch_list: str = "9.0a", max_jobs: int = 2,
                 staging: Path | None = None, pch: bool | str | None = None,
                 delegate: Callable[[Delegation], BuildAnswer] | None = None,
                 on_module: Callable[[ModuleType], None] | None = None) -> None:
        if mode not in ("build", "load", "builder"):
            raise ValueError(f"mode must be 'build', 'load' or 'builder', not {mode!r}")
        self.root = root
        #: Where missing extensions are built when the cache itself is read-only (the compile
        #: sandbox): the trusted side publishes them into ``root`` afterwards (`publish_staged`).
        self.staging = staging
        self.mode = mode
        #: Precompiled torch/extension.h for C++ files (build mode); None: on unless the cache
        #: has a ``pch/disabled`` file.
        self.pch = bool(pch) if pch is not None else not (root / _PCH_DIR / _PCH_DISABLED).exists()
        #: ``pch="use"``: use published PCHs, never build one (their building left to trusted sandboxes).
        self.pch_build = pch != "use"
        self.arch_list = arch_list
        self.max_jobs = max_jobs
        self.delegate = delegate if mode in ("build", "load") else None
        self.on_module = on_module
        #: (``load`` mode) Where the candidate is, for a lazy build: importing its module, in
        #: ``ModelNew.__init__``, in a forward; None: no build may start (timing, profiling).
        self.phase: BuildPhase | None = None
        #: One record per extension requested: name, key, cached, seconds, kernels.
        self.records: list[BuildRecord] = []
        self.logs: list[str] = []
        #: Every build that failed, as raised (a candidate may catch it: `BuildError.failure`).
        self.errors: list[BuildError] = []
        #: Modules handed to the candidate, for the no-op substitution test.
        self.modules: list[ModuleType] = []
        #: The module of each build already handed out: the same call again (a helper without a
        #: cache, a build in every forward) gets the same module, wrapped once.
        self._handed: dict[tuple[str, str], ModuleType] = {}

    # -- keys ----------------------------------------------------------------------------
    def key(self, name: str, parts: Mapping[str, object]) -> str:
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

        self._orig_load_inline: Callable[..., Any] = cpp_extension.load_inline
        self._orig_load: Callable[..., Any] = cpp_extension.load
        cpp_extension.load_inline = self.load_inline  # type: ignore[assignment]
        cpp_extension.load = self.load  # type: ignore[assignment]
        if self.mode == "builder":
            # A builder builds and never loads: loading runs the library's static initialisers.
            cpp_extension._import_module_from_library = lambda *args, **kwargs: None
        os.environ["TORCH_CUDA_ARCH_LIST"] = self.arch_list
        os.environ["MAX_JOBS"] = str(self.max_jobs)

    def load_inline(self, name: str, cpp_sources: Any, cuda_sources: Any = None, functions: Any = None,
                    **kwargs: Any) -> ModuleType | None:
        """torch's ``load_inline`` cached by content; ``None`` in the builder's mode (it never loads)."""
        kwargs.pop("build_directory", None)
        kwargs.pop("verbose", None)
        parts: dict[str, object] = {
            "kind": "inline",
            "cpp_sources": _as_list(cpp_sources),
            "cuda_sources": _as_list(cuda_sources),
            "functions": functions if isinstance(functions, (dict, type(None))) else _as_list(functions),
            **{k: (_as_list(v) if isinstance(v, (list, tuple)) else v) for k, v in sorted(kwargs.items())},
        }
        cuda = bool(parts["cuda_sources"])
        request: JsonObject | None = None
        refusal = builder_refusal(kwargs)
        if refusal is None and _plain_data(parts):  # JSON already: it travels to the builder as it is
            request = {"name": name, "cpp_sources": as_json(parts["cpp_sources"]),
                       "cuda_sources": as_json(parts["cuda_sources"]), "functions": as_json(parts["functions"]),
                       "kwargs": as_json({k: parts[k] for k in kwargs})}

        def build(directory: Path, record: BuildRecord) -> ModuleType:
            extra = kwargs.pop("extra_cuda_cflags", None)
            cflags = [*(_as_list(extra)), *(_PTXAS_VERBOSE if cuda else ())]
            record.extra_cflags = tuple(f for f in _as_list(kwargs.get("extra_cflags")) if f.strip())
            with self._ninja_hooks(record):
                built: ModuleType = self._orig_load_inline(
                    name, cpp_sources, cuda_sources=cuda_sources, functions=functions,
                    build_directory=str(directory), verbose=True, extra_cuda_cflags=cflags or None, **kwargs,
                )
            return built

        return self._get(name, parts, build, request=request, refusal=refusal)

    def build_request(self, request: JsonObject) -> BuildRecord:
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
        cpp, cuda = request.get("cpp_sources"), request.get("cuda_sources")
        if not all(isinstance(s, list) and all(isinstance(x, str) for x in s) for s in (cpp, cuda)):
            raise ValueError("malformed build request: sources must be lists of strings")
        functions = request.get("functions")
        self.load_inline(name, cpp, cuda_sources=cuda or None, functions=functions, **kwargs)
        return self.records[-1]

    def load(self, name: str, sources: Any, **kwargs: Any) -> ModuleType | None:
        kwargs.pop("build_directory", None)
        kwargs.pop("verbose", None)
        paths = _as_list(sources)
        contents = []
        for path in paths:
            contents.append(Path(path).read_text())
        parts: dict[str, object] = {
            "kind": "files",
            "sources": contents,
            "names": [os.path.basename(p) for p in paths],
            **{k: (_as_list(v) if isinstance(v, (list, tuple)) else v) for k, v in sorted(kwargs.items())},
        }
        cuda = any(p.endswith((".cu", ".cuh")) for p in paths)

        def build(directory: Path, record: BuildRecord) -> ModuleType:
            extra = kwargs.pop("extra_cuda_cflags", None)
            cflags = [*(_as_list(extra)), *(_PTXAS_VERBOSE if cuda else ())]
            record.extra_cflags = tuple(f for f in _as_list(kwargs.get("extra_cflags")) if f.strip())
            with self._ninja_hooks(record):
                loaded: ModuleType = self._orig_load(name, paths, build_directory=str(directory), verbose=True,
                                                     extra_cuda_cflags=cflags or None, **kwargs)
            return loaded

        return self._get(name, parts, build, refusal="load() of source files")

    def _get(self, name: str, parts: Mapping[str, object], build: _Build, *, request: JsonObject | None = None,
             refusal: str | None = None) -> ModuleType | None:
        if not name.isidentifier():
            raise ValueError(f"extension {name!r} must be a Python identifier")
        key = self.key(name, parts)
        handed = self._handed.get((name, key))
        if handed is not None:
            return handed
        # What the builder builds lives in its own key space; the rest (and the candidate sandbox's
        # copies, laid out flat) in the cache's top level.
        trusted = (request is not None and self.delegate is not None and self.mode == "build") or (
            self.mode == "builder") or (
            self.mode == "load" and (self.root / TRUSTED_DIR / f"{name}-{key}" / _MARKER).is_file())
        directory = (self.root / TRUSTED_DIR if trusted else self.root) / f"{name}-{key}"
        marker = directory / _MARKER
        record = BuildRecord(name=name, key=key, cached=marker.exists(), seconds=0.0)
        if self.mode == "build" and self.delegate is not None:
            # Where the build is (or will be): the referee copies it from there for the candidate.
            record.via = "builder" if trusted else "stage"  # "stage": a stored value, the sandbox's old name
        self.records.append(record)
        if self.mode == "load" and not marker.exists():
            return self._lazy(name, key, request, refusal or "arguments that are not plain data", record)
        if self.mode == "load" or (marker.exists() and self.mode == "build"):
            return self._get_built(name, directory, record)
        if self.mode == "builder" and marker.exists():
            return None  # published meanwhile: nothing to build
        if self.mode == "build" and self.delegate is not None:
            if request is not None:
                return self._delegated(name, key, request, record)
            record.builder_refusal = refusal or "arguments that are not plain data"
        if self.staging is not None:
            directory = self.staging / f"{name}-{key}"
            marker = directory / _MARKER
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / ".kl-lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the kernel releases it if we are killed
            if marker.exists():  # built by a concurrent compile while we waited
                record.cached = True
                if self.mode == "builder":
                    return None
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
            record.seconds = round(time.perf_counter() - started, 3)
            if failure or (module is None and self.mode != "builder"):
                raise self._failed(name, key, log)
            self._note_refused_pch(record, log)
            if self.mode == "builder":
                self._keep_objects(directory, record, log)
                kernels = [k for u in record.objects or () for k in u.kernels]
            else:
                kernels = parse_ptxas(log)
            record.kernels = tuple(kernels)
            marker.write_text(json.dumps({"name": name, "module_file": f"{name}.so",
                                          "kernels": [k.to_dict() for k in kernels]}))
        if self.mode == "builder":
            return None
        assert module is not None
        return self._hand_out(name, key, module)

    def _failed(self, name: str, key: str, log: str, lazy: BuildPhase | None = None) -> BuildError:
        """The error to raise for a failed build, recorded (the candidate may catch it)."""
        error = BuildError(name, log, lazy=lazy, key=key)
        self.errors.append(error)
        return error

    def _delegated(self, name: str, key: str, request: JsonObject, record: BuildRecord) -> ModuleType:
        """Have the trusted side build ``request``, then load what it published."""
        assert self.delegate is not None
        record.via = "builder"
        answer = self.delegate(Delegation(request=request, name=name))
        built = answer.record
        record.seconds = float((built.seconds if built is not None else 0.0) or answer.seconds or 0.0)
        if built is not None:
            record.pch = built.pch if built.pch is not None else record.pch
            record.objects = built.objects if built.objects is not None else record.objects
            record.kernels = built.kernels if built.kernels is not None else record.kernels
        if not answer.ok:
            self.logs.append(answer.log)
            raise self._failed(name, key, answer.log)
        directory = self.root / TRUSTED_DIR / f"{name}-{key}"
        if answer.key != key or not (directory / _MARKER).is_file():
            raise RuntimeError(f"the trusted build of extension {name!r} was not published")
        record.cached = built.cached if built is not None else False
        return self._get_built(name, directory, record)

    def _lazy(self, name: str, key: str, request: JsonObject | None, refusal: str,
              record: BuildRecord) -> ModuleType:
        """(``load`` mode) A build the compile sandbox did not make: the trusted side builds it (or
        says why it will not) and copies it into ``root``, where it is loaded from."""
        if self.delegate is None or self.phase is None:
            raise RuntimeError(
                f"extension {name!r} was not built at compile time, and is first built "
                + ("while being timed or profiled: build it at import, in ModelNew.__init__ or in a forward the "
                   "correctness trials run" if self.delegate is not None else
                   "in a sandbox that cannot build: its sources or flags must not depend on anything that changes "
                   "between the compile and the run"))
        phase = self.phase
        record.via, record.lazy = "builder", phase
        answer = self.delegate(Delegation(request=request, name=name, phase=phase,
                                          refusal=refusal if request is None else None))
        record.seconds = float(answer.seconds or 0.0)
        if not answer.ok:
            self.logs.append(answer.log)
            raise self._failed(name, key, answer.log, lazy=phase)
        directory = self.root / f"{name}-{key}"
        if answer.key != key or not (directory / _MARKER).is_file():
            raise RuntimeError(f"the trusted build of extension {name!r} was not handed to this sandbox")
        record.cached = answer.record.cached if answer.record is not None else False
        return self._get_built(name, directory, record)

    def _get_built(self, name: str, directory: Path, record: BuildRecord) -> ModuleType:
        info = Reader(json.loads((directory / _MARKER).read_text()), f"extension {name!r}'s marker")
        if record.kernels is None:
            try:
                record.kernels = tuple(info.items_of("kernels", KernelInfo.from_dict, optional=True))
            except WireError:  # the figures are feedback only: a build without them still loads
                record.kernels = ()
        if info.data.get("module_file") != f"{name}.so":  # a marker must not point outside its build
            raise RuntimeError(f"corrupt build of extension {name!r}: unexpected module file")
        return self._hand_out(name, record.key, self._import(name, directory / f"{name}.so"))

    def _hand_out(self, name: str, key: str, module: ModuleType) -> ModuleType:
        """The module as the candidate gets it (after `on_module`), recorded."""
        if self.on_module is not None:
            self.on_module(module)
        self.modules.append(module)
        self._handed[(name, key)] = module
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

