"""An attempt's profile (the ``profile`` tool's rows) as the attempt page's table shows it.

Each row is milliseconds per forward (device time of a kernel on CUDA, self CPU time of an op on
the CPU, where the referee names each call of the candidate's extension ``<extension>.<function>``
so its own C++ is in the table), its share of the table's total, and whether it is the
candidate's own code: a function of one of its extensions, or a kernel ptxas reported for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vocabulary.verdict import Verdict

__all__ = ["ProfileLine", "profile_lines"]

_KERNEL_BASE = re.compile(r"[\w:]+")


@dataclass(frozen=True)
class ProfileLine:
    name: str
    calls: int | None
    ms: float
    #: Percent of the rows' total.
    share: float
    #: The candidate's own code (one of its extensions' functions, or one of its kernels).
    own: bool


def _own_names(verdict: Verdict) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(extension names, kernel base names) of the candidate."""
    if verdict.compile is None:
        return (), ()
    extensions = tuple(e.name for e in verdict.compile.extensions)
    kernels = []
    for kernel in verdict.compile.kernels:
        match = _KERNEL_BASE.match(kernel.kernel.removeprefix("void "))
        if match:
            kernels.append(match.group(0).rsplit("::", 1)[-1])
    return extensions, tuple(k for k in kernels if len(k) > 2)


def profile_lines(verdict: Verdict) -> tuple[ProfileLine, ...]:
    """The verdict's profile rows, largest first, with their shares."""
    rows = sorted(verdict.profile, key=lambda r: r.ms, reverse=True)
    total = sum(r.ms for r in rows) or 1.0
    extensions, kernels = _own_names(verdict)

    def own(name: str) -> bool:
        return name.split(".", 1)[0] in extensions or any(k in name for k in kernels)

    return tuple(ProfileLine(name=r.name, calls=r.calls, ms=r.ms, share=100.0 * r.ms / total, own=own(r.name))
                 for r in rows)
