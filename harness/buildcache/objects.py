"""Per-translation-unit object reuse in trusted builders: keys, reuse as a ninja copy, keeping."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from harness.buildcache.compiler import _compiler_identity, _ninja_deps, _ninja_steps, parse_ptxas
from harness.buildcache.layout import (
    _OBJECT_FILE,
    _OBJECT_MARKER,
    _OBJECT_RECIPE,
    _OBJECTS_DIR,
    _PCH_DIR,
    _PCH_NAME_FLAG,
    _REUSE_RULE,
    _TORCH_INCLUDE,
)
from harness.buildcache.records import BuildRecord, UnitRecord
from vocabulary.builds import KernelInfo
from vocabulary.wire import Reader


class _ObjectReuse:
    """`BuildCache`'s object reuse in a builder (the attributes are the cache's)."""

    root: Path
    staging: Path | None
    arch_list: str

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

    def _reuse_objects(self, ninja: dict[str, Any], record: BuildRecord) -> None:
        """(builder) Key every translation unit; rewrite the compile of each whose object the cache
        holds into a copy of it. ``record.objects`` lists them, with what `_keep_objects` needs.
        ``ninja``: the keyword arguments of torch's ``_write_ninja_file`` (untyped)."""
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
            unit = UnitRecord(source=os.path.basename(str(source)), object_file=str(obj), key=key, rule=rule,
                              torch_headers=bool(_TORCH_INCLUDE.search(source_text)),
                              flags=tuple(str(f) for f in flags))
            line = f"build {obj}: {rule} {os.path.abspath(str(source))}"
            if (stored / _OBJECT_MARKER).is_file() and (stored / _OBJECT_FILE).is_file() and line in text:
                text = text.replace(line, f"build {obj}: {_REUSE_RULE} {stored / _OBJECT_FILE}")
                unit.reused = True
                with contextlib.suppress(OSError, ValueError):  # a WireError is one too
                    info = Reader(json.loads((stored / _OBJECT_MARKER).read_text()), "an object's marker")
                    unit.kernels = tuple(info.items_of("kernels", KernelInfo.from_dict, optional=True))
                    unit.first_seconds = info.optional_number("seconds")
                reused.append(unit)
            units.append(unit)
        if reused:  # ninja wants a rule defined before the first build statement using it
            head, _, rest = text.partition("\n")
            path.write_text(f"{head}\n\nrule {_REUSE_RULE}\n  command = cp $in $out\n\n{rest}")
        record.objects = units

    def _keep_objects(self, directory: Path, record: BuildRecord, log: str) -> None:
        """(builder) Stage every object compiled in this build whose only dependencies are its own
        source and read-only headers (system, toolkit, torch, the published PCHs), for the trusted
        side to publish; note each unit's seconds and (CUDA) ptxas figures."""
        steps = _ninja_steps(directory)
        units = record.objects or []
        compiled_cuda = [u for u in units if u.rule == "cuda_compile" and not u.reused]
        kernels = parse_ptxas(log)
        for unit in units:
            unit.seconds = steps.get(unit.object_file, 0.0)
            if unit.reused:
                continue
            if unit.rule == "cuda_compile" and len(compiled_cuda) == 1:
                unit.kernels = tuple(kernels)
            reason = self._untrusted_input(directory, unit)
            if reason is not None:
                unit.kept = reason
                continue
            target = (self.staging or self.root) / _OBJECTS_DIR / unit.key
            if target.exists() or (self.root / _OBJECTS_DIR / unit.key).exists():
                continue
            tmp = target.parent / f".{unit.key}.{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            shutil.copy2(directory / unit.object_file, tmp / _OBJECT_FILE)
            (tmp / _OBJECT_MARKER).write_text(json.dumps({
                "key": unit.key, "source": unit.source, "rule": unit.rule, "seconds": unit.seconds,
                "kernels": [k.to_dict() for k in unit.kernels]}))
            os.rename(tmp, target)
            unit.kept = "stored"

    def _untrusted_input(self, directory: Path, unit: UnitRecord) -> str | None:
        """Why an object cannot be kept for reuse (something besides its key went into it), or None."""
        import sysconfig

        import torch
        from torch.utils import cpp_extension

        deps = _ninja_deps(directory, unit.object_file)
        if deps is None:
            return "no dependency record"
        trusted = [Path(p).resolve() for p in (
            Path(torch.__file__).parent, cpp_extension.CUDA_HOME or "/nonexistent", "/usr",
            sysconfig.get_paths()["include"], sys.prefix, sys.base_prefix, self.root / _PCH_DIR)]
        builds = self.root.resolve()
        own = (directory / unit.source).resolve()
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
