"""The build's ninja file, as torch writes it: where a precompiled header and reused objects come in.

`BuildCache` builds through torch's ``load_inline``/``load``; while torch writes the build's
ninja file, `_NinjaHooks._ninja_hooks` puts a matching precompiled header's directory first on
the C++ compile's include path (`harness.buildcache.pch`) and, in a builder, turns the compile of
each translation unit whose object the cache holds into a copy of it
(`harness.buildcache.objects`). A torch without the hook builds as it would anyway.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.buildcache.layout import _PCH_DIAGNOSTICS
from harness.buildcache.objects import _ObjectReuse
from harness.buildcache.pch import _first_line_includes_torch, _PchSupport
from harness.buildcache.records import BuildRecord
from vocabulary.builds import HeaderUse


class _NinjaHooks(_PchSupport, _ObjectReuse):
    """`BuildCache`'s hook into torch's ninja file (the attributes are the cache's)."""

    mode: str
    pch: bool

    @contextlib.contextmanager
    def _ninja_hooks(self, record: BuildRecord) -> Iterator[None]:
        """While torch writes the build's ninja file, put a matching PCH's directory first on the
        C++ compile's include path (building the PCH if allowed and the cache has none for these
        flags) and, in a builder, turn the compile of every translation unit whose object is in the
        cache into a copy of it."""
        from torch.utils import cpp_extension

        original = getattr(cpp_extension, "_write_ninja_file", None)
        if original is None:  # another torch: no PCH, no reuse, nothing else changes
            record.pch = HeaderUse(status="unsupported")
            yield
            return
        use_pch = self.mode in ("build", "builder") and self.pch
        if not use_pch:
            record.pch = HeaderUse(status="off")

        def write(*args: Any, **kwargs: Any) -> Any:
            cflags, sources = kwargs.get("cflags"), kwargs.get("sources")
            cpp = [s for s in sources or () if str(s).endswith((".cpp", ".cc", ".cxx"))]
            if args or not isinstance(cflags, list):
                record.pch = HeaderUse(status="unsupported")
                return original(*args, **kwargs)
            if use_pch and not cpp:
                record.pch = HeaderUse(status="no_cpp")
            elif use_pch:
                try:
                    include = self._pch_include(cflags, list(kwargs.get("post_cflags") or []), record)
                except Exception as exc:  # noqa: BLE001 - a PCH is an optimisation: build without it
                    record.pch = HeaderUse(status="failed", error=f"{type(exc).__name__}: {exc}"[:300])
                    include = None
                if include is not None and record.pch is not None:
                    if not all(_first_line_includes_torch(Path(s)) for s in cpp):
                        record.pch = replace(record.pch, status="not_first_include",
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
