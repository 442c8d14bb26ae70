"""CPU sizes for a problem sized for a GPU: scale its size constants down until one trial fits a
budget, then check that the problem still admits (trusted side; problem code runs only in
admission sandboxes).

Every size constant set from a literal (`problems.constants.literal_sizes`: integers of at least
16, and the integers in tuples of them) is halved at each step, never below 8 (a value under 16 is
a kernel size, a stride, a dimension index: it stays); constants derived from them follow. The
first step whose footprint (inputs, parameters, outputs on the meta device) fits is taken; if
admission refuses it, the next smaller step is tried, a few times.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.admission import AdmissionReport, admit, measure_footprints
from harness.options import HarnessOptions
from harness.protocol.admission import Footprint
from problems.constants import Constant, Constants, literal_sizes
from problems.spec import Problem, parse_problem
from vocabulary.evaluation import Target

__all__ = ["MAX_HALVINGS", "Sizing", "fit_cpu_sizes", "scaled_sizes"]

#: Halving steps tried (2**16 times smaller at most).
MAX_HALVINGS = 16
#: Constants below this are not sizes to scale (kernel sizes, strides, dims); none goes below _FLOOR.
_SCALE_FROM = 16
_FLOOR = 8
#: Smaller steps tried when admission refuses the first that fits.
_ADMISSION_RETRIES = 2


def _halve(value: int, steps: int) -> int:
    return value if value < _SCALE_FROM else max(_FLOOR, value >> steps)


def scaled_sizes(sizes: Mapping[str, int | tuple[int, ...]], steps: int) -> Constants:
    """The size constants after ``steps`` halvings (an integer, or a list of them, as ``CPU_SIZES``
    declares them); only the ones that change."""
    scaled: Constants = {}
    for name, value in sizes.items():
        new = tuple(_halve(v, steps) for v in value) if isinstance(value, tuple) else _halve(value, steps)
        if new != value:
            scaled[name] = list(new) if isinstance(new, tuple) else new
    return scaled


@dataclass(frozen=True)
class Sizing:
    """What the search found: the CPU sizes (empty if the full size fits), the footprints at full
    and chosen size, the admission report of the chosen sizes, and notes."""

    cpu_sizes: Constants
    full: Footprint | None
    chosen: Footprint | None
    admission: AdmissionReport | None
    notes: tuple[str, ...] = field(default=())

    @property
    def admitted(self) -> bool:
        return self.admission is not None and self.admission.admitted


def with_cpu_sizes(problem: Problem, cpu_sizes: Mapping[str, Constant]) -> Problem:
    """The problem as if its file declared ``CPU_SIZES = cpu_sizes`` (its own, if any, replaced)."""
    declared = problem.source + f"\nCPU_SIZES = {cpu_sizes!r}\n"
    return parse_problem(declared, problem_id=problem.id, level=problem.level)


def fit_cpu_sizes(problem: Problem, budget_bytes: int, options: HarnessOptions | None = None) -> Sizing:
    """Find CPU sizes under which one trial of ``problem`` needs at most ``budget_bytes``, and
    check the problem admits with them on the cpu target."""
    options = options or HarnessOptions()
    sizes = literal_sizes(ast.parse(problem.source))
    steps = [scaled_sizes(sizes, k) for k in range(MAX_HALVINGS + 1)]
    results = measure_footprints(problem, steps, options)
    footprints = [r.footprint for r in results]
    notes: list[str] = []
    if footprints[0] is None:
        notes.append("inputs not measurable on the meta device: " + results[0].error.strip()[-300:])
    fitting = [k for k, f in enumerate(footprints) if f is not None and f.total <= budget_bytes]
    if not fitting:
        if footprints[0] is not None:
            notes.append(f"no halving of the size constants fits {budget_bytes} bytes")
        return Sizing({}, footprints[0], None, None, tuple(notes))
    first = fitting[0]
    report: AdmissionReport | None = None
    chosen = first
    for k in [first, *[j for j in fitting if j > first][:_ADMISSION_RETRIES]]:
        chosen = k
        report = admit(with_cpu_sizes(problem, steps[k]) if steps[k] else problem, Target.CPU, options)
        if report.admitted:
            break
        notes.append(f"{k} halvings: refused ({'; '.join(report.reasons)[:300]})")
    return Sizing(steps[chosen], footprints[0], footprints[chosen], report, tuple(notes))
