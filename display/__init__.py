"""How the service's figures and names read to a person, the same on the dashboard and in a terminal.

The dashboard's pages (`api.dashboard.pages`, its Jinja2 filters; ``static/dashboard.js`` mirrors
these for what it adds live) and the command line (`cli.client`) format with these functions.

Owns: the number formats (`fmt_ms`, `fmt_speedup`, `fmt_pct`, `fmt_usd`, with `finite`, the one
rule for "a number to show") and a problem's label (`problem_label`).
May import: the standard library only: the API and the CLI's client commands both import it, so
it must bring no server dependency into a client command and nothing of either into the other.
In and out: values come in (anything that is not a finite number shows as ``—``); strings go out.
"""

from __future__ import annotations

import math

__all__ = ["MISSING", "finite", "fmt_ms", "fmt_pct", "fmt_speedup", "fmt_usd", "problem_label"]

#: What a missing (or non-finite) figure shows as.
MISSING = "—"


def finite(value: object) -> float | None:
    """``value`` as a float if it is a finite number (a bool is not one), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def fmt_ms(value: object) -> str:
    """Milliseconds: three decimals from 1 ms, three significant digits below."""
    v = finite(value)
    if v is None:
        return MISSING
    return f"{v:.3f}" if v >= 1 else f"{v:.3g}"


def fmt_speedup(value: object) -> str:
    """A speedup: ``1.23×``."""
    v = finite(value)
    return MISSING if v is None else f"{v:.2f}×"


def fmt_pct(value: object) -> str:
    """A percentage: ``12.3%``."""
    v = finite(value)
    return MISSING if v is None else f"{v:.1f}%"


def fmt_usd(value: object) -> str:
    """Dollars: cents, or four decimals for a cost under a cent (``$0.0042``)."""
    v = finite(value)
    return MISSING if v is None else f"${v:.2f}" if v >= 0.01 or v == 0 else f"${v:.4f}"


def problem_label(bundled_id: str | None, sha256: str) -> str:
    """A job's problem in a listing: its bundled id, or ``posted`` and the source's hash prefix."""
    return bundled_id or f"posted {sha256[:10]}"
