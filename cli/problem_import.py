"""``kernelloop problems import DIR``: KernelBench files as they are, made ready for the cpu target.

Each ``*.py`` of the folder is parsed, sized for the cpu target (`harness.sizing`: size constants
halved until one trial fits the budget, then admission on the cpu target) and, if admitted, written
to the output folder as the original text, unchanged, followed by the declarations it needs
(``CPU_SIZES``; ``RANDOM = True`` when its forward draws random numbers, e.g. dropout). The
originals are never written to. ``suite.txt`` (the suite format ``kernelloop bench`` reads) lists
the admitted ones; ``import.json`` holds every file's outcome.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.options import HarnessOptions
from harness.protocol.admission import Footprint, format_bytes
from harness.sizing import Sizing, fit_cpu_sizes
from problems.constants import Constant, Constants
from problems.spec import Problem, ProblemFormatError, parse_problem
from vocabulary.wire import JsonObject

__all__ = ["ImportOutcome", "import_folder", "render_declarations"]

#: Marks where the original file ends in a written problem.
ADDED_MARKER = "# --- added by `kernelloop problems import`; the lines above are the original file, unchanged ---"
#: One trial's inputs, parameters and outputs on the cpu target by default (keeps a CPU run short).
DEFAULT_IMPORT_BUDGET_MB = 16
SUITE_FILE = "suite.txt"
REPORT_FILE = "import.json"


@dataclass(frozen=True)
class ImportOutcome:
    """One file's outcome: admitted or not, why, and what was declared."""

    name: str
    admitted: bool
    reasons: tuple[str, ...]
    cpu_sizes: Constants
    random: bool
    full: Footprint | None
    chosen: Footprint | None
    written: str | None

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "admitted": self.admitted, "reasons": list(self.reasons),
                "cpu_sizes": self.cpu_sizes, "random": self.random,
                "full_bytes": self.full.to_dict() if self.full else None,
                "cpu_bytes": self.chosen.to_dict() if self.chosen else None, "written": self.written}

    @property
    def summary(self) -> str:
        full = format_bytes(self.full.total) if self.full else "?"
        chosen = format_bytes(self.chosen.total) if self.chosen else "?"
        return f"{full} → {chosen}"


def render_declarations(cpu_sizes: Mapping[str, Constant], random: bool) -> str:
    lines = ["", "", ADDED_MARKER]
    if cpu_sizes:
        lines.append(f"CPU_SIZES = {cpu_sizes!r}")
    if random:
        lines.append("RANDOM = True")
    return "\n".join(lines) + "\n"


def _draws_random(sizing: Sizing) -> bool:
    report = sizing.admission
    return report is not None and any(
        not c.passed and c.name == "deterministic" and "RANDOM = True" in c.detail for c in report.checks)


def _import_one(path: Path, out_dir: Path, budget_bytes: int, options: HarnessOptions) -> ImportOutcome:
    source = path.read_text()
    try:
        problem: Problem = parse_problem(source, problem_id=path.stem)
    except ProblemFormatError as exc:
        return ImportOutcome(path.name, False, (f"not a problem file: {exc}",), {}, False, None, None, None)
    declared_random = random = problem.random
    sizing = fit_cpu_sizes(problem, budget_bytes, options)
    if _draws_random(sizing) and not random:
        random = True
        problem = parse_problem(source + "\nRANDOM = True\n", problem_id=path.stem)
        sizing = fit_cpu_sizes(problem, budget_bytes, options)
    reasons = tuple(sizing.admission.reasons if sizing.admission else ()) + sizing.notes
    written = None
    if sizing.admitted:
        target = out_dir / path.name
        target.write_text(source + render_declarations(sizing.cpu_sizes, random and not declared_random))
        written = target.name
    return ImportOutcome(path.name, sizing.admitted, reasons if not sizing.admitted else sizing.notes,
                         sizing.cpu_sizes, random, sizing.full, sizing.chosen, written)


def import_folder(folder: Path, out_dir: Path, *, budget_bytes: int, options: HarnessOptions | None = None,
                  on_outcome: Any = None) -> list[ImportOutcome]:
    """Import every ``*.py`` of ``folder`` into ``out_dir`` (created; must not be ``folder``).

    Raises:
        ValueError: the output folder is the input folder (the originals are never written to).
    """
    options = options or HarnessOptions()
    if out_dir.resolve() == folder.resolve():
        raise ValueError("the output folder must differ from the input folder: the originals are never edited")
    out_dir.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for path in sorted(folder.glob("*.py"), key=_natural):
        if path.name.startswith("_"):
            continue
        outcome = _import_one(path, out_dir, budget_bytes, options)
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
    admitted = [o.written for o in outcomes if o.written]
    (out_dir / SUITE_FILE).write_text(
        f"# {len(admitted)} problems admitted on the cpu target by `kernelloop problems import {folder}`\n"
        + "".join(f"{name}\n" for name in admitted))
    (out_dir / REPORT_FILE).write_text(json.dumps(
        {"source": str(folder), "budget_bytes": budget_bytes, "problems": [o.to_dict() for o in outcomes]},
        indent=1) + "\n")
    return outcomes


def _natural(path: Path) -> tuple[int, str]:
    head = path.name.split("_", 1)[0]
    return (int(head) if head.isdigit() else 1 << 30, path.name)
