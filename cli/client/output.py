"""What the client commands share besides HTTP: exit codes, the two consoles, number formats."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from enum import IntEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

err = Console(stderr=True)
out = Console()


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    CANCELLED = 3
    #: Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
    INTERRUPTED = 130


#: ``--json`` of every command that prints data: machine-readable JSON on stdout, notes on stderr.
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout instead of tables (messages go to stderr)")]


def print_json(value: Any) -> None:
    """One JSON document on stdout, on one line (``jq`` reads it)."""
    sys.stdout.write(json.dumps(value, default=str) + "\n")
    sys.stdout.flush()


JOB_EXIT_CODES = {"succeeded": ExitCode.OK, "failed": ExitCode.FAILED, "cancelled": ExitCode.CANCELLED}


def finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def fmt_ms(value: Any) -> str:
    v = finite(value)
    return "—" if v is None else f"{v:.3f}" if v >= 1 else f"{v:.3g}"


def fmt_x(value: Any) -> str:
    v = finite(value)
    return "—" if v is None else f"{v:.2f}×"


def fmt_pct(value: Any) -> str:
    v = finite(value)
    return "—" if v is None else f"{v:.1f}%"


def fmt_usd(value: Any) -> str:
    v = finite(value)
    return "—" if v is None else f"${v:.4f}" if 0 < v < 0.01 else f"${v:.2f}"


def status_text(status: str) -> Text:
    colour = {"pass": "green", "fail": "red", "error": "red", "suspicious": "yellow"}.get(status, "white")
    return Text(status, style=colour)


def problem_name(job: Mapping[str, Any]) -> str:
    problem = job.get("problem") or {}
    return problem.get("bundled_id") or f"posted {str(problem.get('sha256', ''))[:10]}"

