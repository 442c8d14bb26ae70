"""The precompiled torch/extension.h: building and probing one, and where a build finds it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from harness.buildcache.compiler import _gcc_identity
from harness.buildcache.copies import current_pch_entries
from harness.buildcache.flags import _flags_text, normalise_header_flags
from harness.buildcache.layout import (
    _FIRST_LINE_PCH,
    _PCH_DIR,
    _PCH_FILE,
    _PCH_HEADER,
    _PCH_MARKER,
    _PCH_MAX,
    _PCH_NAME_FLAG,
    _PCH_RECIPE,
    _PCH_REFUSED,
)
from harness.buildcache.records import BuildRecord
from vocabulary.builds import HeaderUse


def build_pch(compiler: Sequence[str], flags: Sequence[str], post: Sequence[str], header: Path,
              directory: Path) -> tuple[str, str]:
    """Precompile ``header`` (``.../torch/extension.h``) with these flags into
    ``directory/torch/extension.h.gch``, with a copy of the header beside it, and check that g++
    uses it for a file whose first line includes it, compiled with the same flags, and compiles a
    file that includes it twice (load_inline's implicit include, then the source's own: g++ reads
    the second from the directory where it found the PCH, so without the copy it fails with
    "extension.h: No such file or directory"). Returns ``("built", "")``, or ``("failed" |
    "invalid", why)``: g++ skips an unusable PCH without a word, so ``-H`` must name it first."""
    gch = directory.joinpath(*_PCH_FILE)
    gch.parent.mkdir(parents=True, exist_ok=True)
    built = subprocess.run([*compiler, "-x", "c++-header", *flags, str(header), "-o", str(gch), *post],
                           capture_output=True, text=True, cwd=directory, check=False)
    if built.returncode != 0 or not gch.is_file():
        return "failed", (built.stderr or "")[-300:]
    shutil.copyfile(header, directory.joinpath(*_PCH_HEADER))
    probe = subprocess.run([*compiler, f"-I{directory}", *flags, "-H", "-fsyntax-only", "-x", "c++", "-", *post],
                           input=_PCH_PROBE, capture_output=True, text=True, cwd=directory, check=False)
    first = next((ln for ln in probe.stderr.splitlines() if ln.strip()), "")
    if probe.returncode != 0 or first.strip() != f"! {gch}":
        gch.unlink(missing_ok=True)
        return "invalid", (first if probe.returncode == 0 else probe.stderr)[-300:]
    return "built", ""


#: What a new PCH must compile, and be used for: the file load_inline writes for a binding that
#: includes torch itself (the implicit include first, then the source's).
_PCH_PROBE = "#include <torch/extension.h>\n#include <torch/extension.h>\n"


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


class _PchSupport:
    """`BuildCache`'s precompiled-header steps (the attributes are the cache's)."""

    root: Path
    staging: Path | None
    pch_build: bool

    def _known_headers(self) -> list[str]:
        """The binding flags of the published PCHs, as the feedback shows them."""
        known = []
        for marker in (entry / _PCH_MARKER for entry in current_pch_entries(self.root / _PCH_DIR)):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                extra = json.loads(marker.read_text()).get("extra")
                if isinstance(extra, list):
                    known.append(_flags_text(extra))
        return sorted(set(known))

    def _pch_include(self, cflags: list[str], post_cflags: list[str], record: BuildRecord) -> Path | None:
        """The directory holding ``torch/extension.h.gch`` for these flags, or None."""
        from torch.utils import cpp_extension

        compiler = shlex.split(cpp_extension.get_cxx_compiler())
        identity = _gcc_identity(tuple(compiler))
        if identity is None:
            record.pch = HeaderUse(status="not_gcc", reason="the host compiler is not g++")
            return None
        flags = normalise_header_flags([f for f in shlex.split(" ".join(cflags)) if not _PCH_NAME_FLAG.match(f)])
        post = normalise_header_flags(shlex.split(" ".join(post_cflags)))
        extra = normalise_header_flags(record.extra_cflags)
        header = Path(cpp_extension._TORCH_PATH) / "include" / "torch" / "extension.h"
        import torch

        material = {"recipe": _PCH_RECIPE, "compiler": identity, "flags": flags, "post": post,
                    "torch": torch.__version__, "header": str(header), "mtime": header.stat().st_mtime_ns}
        key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:24]
        record.pch = used = HeaderUse(key=key, status="used", seconds=0.0, flags=tuple(extra))
        published = self.root / _PCH_DIR / key
        if (published / _PCH_MARKER).is_file():
            return published
        if not self.pch_build:
            known = self._known_headers()
            record.pch = replace(used, status="missing", reason=(
                f"no precompiled torch header for binding flags {_flags_text(extra)}"
                + (f"; prepared: {'; '.join(known)}" if known else "; none prepared yet")))
            return None
        pch_root = (self.staging or self.root) / _PCH_DIR
        if len(current_pch_entries(self.root / _PCH_DIR)) >= _PCH_MAX:
            record.pch = replace(used, status="full", reason=f"the cache holds its maximum of {_PCH_MAX} headers")
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
                    record.pch = replace(used, status=status, error=detail)
                    return None
                seconds = round(time.perf_counter() - started, 3)
                tmp.joinpath(_PCH_MARKER).write_text(json.dumps({"key": key, "seconds": seconds, "extra": extra,
                                                                 **material}))
                try:
                    os.rename(tmp, target)
                except OSError:
                    # Published meanwhile from a staging directory (a worker's warm-up), which does
                    # not take this lock: that header is the same key's, so it serves this build.
                    if (target / _PCH_MARKER).is_file():
                        return target
                    raise
                record.pch = replace(used, status="built", seconds=seconds)
                return target
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


    @staticmethod
    def _note_refused_pch(record: BuildRecord, log: str) -> None:
        """g++ found the offered PCH and did not use it (``-Winvalid-pch``): say so, and why."""
        match = _PCH_REFUSED.search(log)
        if match and record.pch is not None and record.pch.status in ("used", "built"):
            record.pch = replace(record.pch, status="rejected",
                                 reason=f"g++ did not use the precompiled header:{match.group(1).rstrip()}")
