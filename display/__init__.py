"""How the service's figures and names read to a person, the same on the dashboard and in a terminal.

The dashboard's pages (`api.dashboard.pages`, its Jinja2 filters; ``static/dashboard.js`` mirrors
these for what it adds live) and the command line (`cli.client`) format with these functions.

Owns: the number formats (`fmt_ms`, `fmt_speedup`, `fmt_pct`, `fmt_usd`, with `finite`, the one
rule for "a number to show"), a problem's label (`problem_label`), and the time-to-verdict table
(`display.timings`: p50 and p95 per stage, lane seconds per attempt kind, verdicts per lane-hour)
that the job page, ``bench`` reports and the iteration benchmark share.
May import: the standard library only: the API and the CLI's client commands both import it, so
it must bring no server dependency into a client command and nothing of either into the other.
In and out: values come in (anything that is not a finite number shows as ``—``); strings go out.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Context, Decimal

__all__ = ["MISSING", "finite", "fmt_ms", "fmt_pct", "fmt_speedup", "fmt_usd", "llm_label", "problem_label"]

#: What a missing (or non-finite) figure shows as.
MISSING = "—"


def finite(value: object) -> float | None:
    """``value`` as a float if it is a finite number (a bool is not one), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _fixed(v: float, places: int) -> str:
    """``v`` with ``places`` decimals as the dashboard's script writes it (JavaScript's ``toFixed``:
    the double's exact value, a tie away from zero; Python's formats round a tie to even)."""
    return f"{Decimal(v).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):f}"


#: Three significant digits, rounded as JavaScript's ``toPrecision`` rounds.
_THREE_DIGITS = Context(prec=3, rounding=ROUND_HALF_UP)


def fmt_ms(value: object) -> str:
    """Milliseconds: three decimals from 1 ms, three significant digits below (never an exponent)."""
    v = finite(value)
    if v is None:
        return MISSING
    return _fixed(v, 3) if v >= 1 else f"{_THREE_DIGITS.plus(Decimal(v)).normalize():f}"


def fmt_speedup(value: object) -> str:
    """A speedup: ``1.23×``."""
    v = finite(value)
    return MISSING if v is None else f"{_fixed(v, 2)}×"


def fmt_pct(value: object) -> str:
    """A percentage: ``12.3%``."""
    v = finite(value)
    return MISSING if v is None else f"{_fixed(v, 1)}%"


def fmt_usd(value: object) -> str:
    """Dollars: cents, or four decimals for a cost under a cent (``$0.0042``)."""
    v = finite(value)
    return MISSING if v is None else f"${_fixed(v, 2 if v >= 0.01 or v == 0 else 4)}"


def problem_label(bundled_id: str | None, sha256: str) -> str:
    """A job's problem in a listing: its bundled id, or ``posted`` and the source's hash prefix."""
    return bundled_id or f"posted {sha256[:10]}"


def llm_label(profile: str | None, model: str | None) -> str:
    """A job's LLM: the profile, and the model it asks for when that is not the profile's name
    (``openai (gpt-4o)``, ``scripted``); ``no LLM`` for an evaluation."""
    if not profile:
        return "no LLM"
    return profile if not model or model == profile else f"{profile} ({model})"
