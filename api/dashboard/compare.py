"""Two attempts of a job side by side: their figures and the diff of their sources (the attempts
table's ticks pick them; the first, the older one unless swapped, is the diff's "−" side)."""

from __future__ import annotations

from dataclasses import dataclass

from api.dashboard.views import Diff
from display import fmt_ms, fmt_pct, fmt_speedup
from store import Attempt
from vocabulary.verdict import Verdict

__all__ = ["Comparison", "FigureRow", "compare_attempts"]


@dataclass(frozen=True)
class FigureRow:
    """One figure of both attempts; ``better`` names the side that wins it (``a``, ``b`` or "")."""

    label: str
    a: str
    b: str
    better: str = ""


@dataclass(frozen=True)
class Comparison:
    """Attempts ``a_n`` and ``b_n``: their figures, and the diff from ``a``'s source to ``b``'s."""

    a_n: int
    b_n: int
    a_status: str
    b_status: str
    rows: tuple[FigureRow, ...]
    diff: Diff


def _lower_wins(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == b:
        return ""
    return "a" if a < b else "b"


def compare_attempts(a: Attempt, b: Attempt) -> Comparison:
    """``a`` and ``b``, their figures and the diff from ``a``'s source to ``b``'s."""
    va, vb = a.read_verdict(), b.read_verdict()

    def trials(v: Verdict) -> str:
        return f"{sum(t.passed for t in v.trials)}/{len(v.trials)}" if v.trials else "—"

    def higher(x: float | None, y: float | None) -> str:
        return {"a": "b", "b": "a", "": ""}[_lower_wins(x, y)]

    rows = (
        FigureRow("tool", a.tool, b.tool),
        FigureRow("status", a.status.value, b.status.value),
        FigureRow("stage", a.stage, b.stage),
        FigureRow("correctness trials passed", trials(va), trials(vb)),
        FigureRow("median ms", fmt_ms(a.median_ms), fmt_ms(b.median_ms), _lower_wins(a.median_ms, b.median_ms)),
        FigureRow("vs eager", fmt_speedup(a.speedup_vs_eager), fmt_speedup(b.speedup_vs_eager),
                  higher(a.speedup_vs_eager, b.speedup_vs_eager)),
        FigureRow("vs torch.compile", fmt_speedup(a.speedup_vs_compile), fmt_speedup(b.speedup_vs_compile),
                  higher(a.speedup_vs_compile, b.speedup_vs_compile)),
        FigureRow("% of SOL", fmt_pct(a.pct_of_sol), fmt_pct(b.pct_of_sol), higher(a.pct_of_sol, b.pct_of_sol)),
        FigureRow("compile s", f"{a.compile_s:.1f}" if a.compile_s is not None else "—",
                  f"{b.compile_s:.1f}" if b.compile_s is not None else "—", _lower_wins(a.compile_s, b.compile_s)),
        FigureRow("message", va.message or "—", vb.message or "—"),
    )
    return Comparison(a_n=a.n, b_n=b.n, a_status=a.status.value, b_status=b.status.value, rows=rows,
                      diff=Diff.between(a.source, b.source))
