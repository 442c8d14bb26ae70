"""The problem file format: a KernelBench-style module plus literal declarations.

A problem is Python source defining ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``, with module constants for sizes. Beside them it may declare, as plain
literals at module level (read here with ``ast.literal_eval``: the source is never executed in
this process):

=====================  ==============================================================  ==========
name                   meaning                                                         default
=====================  ==============================================================  ==========
``MODE``               ``"train"`` (modules as PyTorch builds them) or ``"eval"``      ``"train"``
``POLICY``             ``"mixed"`` (vendor ops allowed beside custom kernels) or       ``"mixed"``
                       ``"pure"`` (no torch compute in ``forward``)
``ATOL`` / ``RTOL``    tolerance override                                              per dtype
``CPU_SIZES``          module constants replaced on the ``cpu`` target, e.g.           ``{}``
                       ``{"batch_size": 2, "height": 16}``; constants computed from
                       them (``input_shape = (batch_size, dim)``) follow
                       (`problems.constants`)
``EXTRA_SHAPES``       list of input-only constant overrides; each adds a trial        ``[]``
``INPUT_VARIANTS``     whether a trial with another value distribution is added        ``True``
``RANDOM``             forward draws random numbers (dropout): the RNG is seeded       ``False``
                       identically before every reference and candidate forward
``NONDETERMINISTIC``   output varies even with the RNG seeded; refused unless True     ``False``
``DESCRIPTION``        one line for listings (else the module docstring's first line)  ``""``
=====================  ==============================================================  ==========

Everything here is stdlib only: the harness (torch + stdlib) and the API (no torch) both use it.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TypeAlias

from problems.constants import (
    DECLARATION_NAMES,
    Constant,
    Constants,
    NotConstant,
    as_constant,
    assigned_names,
    resolve_overrides,
)

__all__ = [
    "MAX_SOURCE_BYTES",
    "REQUIRED_NAMES",
    "Mode",
    "Policy",
    "Problem",
    "ProblemFields",
    "ProblemFormatError",
    "parse_problem",
]

#: `Problem.to_dict()`: the problem as JSON (what the referee's sandboxes and the store's
#: ``declarations`` column receive): declarations and strings, the sizes and the extra shapes.
ProblemFields: TypeAlias = "dict[str, Constant | Constants | list[Constants]]"

#: A problem or candidate larger than this is refused before anything runs.
MAX_SOURCE_BYTES = 256 * 1024
REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


class Mode(StrEnum):
    TRAIN = "train"
    EVAL = "eval"


class Policy(StrEnum):
    MIXED = "mixed"
    PURE = "pure"


class ProblemFormatError(ValueError):
    """The source is not a valid problem file; the message says what to fix."""


@dataclass(frozen=True)
class Problem:
    """A parsed problem: its source and its declarations. Building it runs nothing."""

    id: str
    source: str
    mode: Mode = Mode.TRAIN
    policy: Policy = Policy.MIXED
    atol: float | None = None
    rtol: float | None = None
    cpu_sizes: Constants = field(default_factory=dict)
    extra_shapes: tuple[Constants, ...] = ()
    input_variants: bool = True
    nondeterministic: bool = False
    random: bool = False
    description: str = ""
    level: int | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def to_dict(self) -> ProblemFields:
        return {
            "id": self.id,
            "source": self.source,
            "sha256": self.sha256,
            "mode": self.mode.value,
            "policy": self.policy.value,
            "atol": self.atol,
            "rtol": self.rtol,
            "cpu_sizes": dict(self.cpu_sizes),
            "extra_shapes": [dict(s) for s in self.extra_shapes],
            "input_variants": self.input_variants,
            "nondeterministic": self.nondeterministic,
            "random": self.random,
            "description": self.description,
            "level": self.level,
        }

    def size_overrides(self, target: str) -> Constants:
        """The constants to set on the loaded module on ``target``: ``CPU_SIZES`` on ``cpu`` plus
        every constant derived from them."""
        return resolve_overrides(self.source, self.cpu_sizes) if target == "cpu" else {}

    def trial_shapes(self, target: str) -> tuple[Constants, ...]:
        """``EXTRA_SHAPES`` as each trial sets them on ``target``: on top of the CPU sizes there,
        with the constants derived from both."""
        base = dict(self.cpu_sizes) if target == "cpu" else {}
        return tuple(resolve_overrides(self.source, {**base, **shape}) for shape in self.extra_shapes)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Problem:
        """The problem of its ``to_dict()`` (parsed again from its source: the declarations follow).

        Raises:
            ProblemFormatError: ``source`` or ``id`` is not a string, ``level`` not an integer, or
                the source is not a valid problem file.
        """
        source, problem_id, level = data.get("source"), data.get("id"), data.get("level")
        if not isinstance(source, str) or not isinstance(problem_id, str):
            raise ProblemFormatError("a problem's fields need its source and id as strings")
        if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
            raise ProblemFormatError(f"a problem's level is an integer, got {level!r}")
        return parse_problem(source, problem_id=problem_id, level=level)


_DECLARATIONS = DECLARATION_NAMES


def _literal_assignments(tree: ast.Module) -> dict[str, object]:
    """The declarations' literal values by name, not checked yet (each is, where it is read)."""
    found: dict[str, object] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name) and target.id in _DECLARATIONS and value is not None:
                try:
                    found[target.id] = ast.literal_eval(value)
                except ValueError as exc:
                    raise ProblemFormatError(
                        f"line {node.lineno}: {target.id} must be a plain literal ({exc})"
                    ) from None
    return found


def _defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names | assigned_names(tree)


def _check_sizes(name: str, value: object, module_names: set[str]) -> Constants:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ProblemFormatError(f"{name} must be a dict of module constant names to values")
    unknown = sorted(set(value) - module_names)
    if unknown:
        raise ProblemFormatError(f"{name} overrides constants the module does not define: {unknown}")
    sizes: Constants = {}
    for key, size in value.items():
        try:
            sizes[key] = as_constant(size)
        except NotConstant:
            raise ProblemFormatError(f"{name}[{key!r}] must be a number, a string, a bool, None or a tuple or "
                                     f"list of them, got {size!r}") from None
    return sizes


def _choice(enum: type[StrEnum], value: object) -> str:
    """A declaration that names one of ``enum``'s values (a ValueError as the enum raises it if not)."""
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a valid {enum.__name__}")
    return value


def _number(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ProblemFormatError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def missing_names_message(missing: Sequence[str], defined: Collection[str]) -> str:
    """Which of `REQUIRED_NAMES` a problem lacks, what it should define instead, and where the
    format is documented (with a defined name that looks like a missing one, if any)."""
    close = {name: difflib.get_close_matches(name, [d for d in defined if d not in REQUIRED_NAMES], n=1,
                                             cutoff=0.6) for name in missing}
    hints = [f"{found[0]!r} is defined: rename it {name}?" for name, found in close.items() if found]
    lacks = " and ".join([", ".join(missing[:-1]), missing[-1]] if len(missing) > 1 else missing)
    return (f"the problem lacks {lacks} at module level: a problem file defines class Model(nn.Module), "
            f"get_inputs() and get_init_inputs(), as KernelBench's do (the format: docs/problems.md)"
            + (f"; {' '.join(hints)}" if hints else ""))


def parse_problem(source: str, *, problem_id: str, level: int | None = None) -> Problem:
    """Parse and validate problem source statically.

    Args:
        source: the problem's Python source.
        problem_id: a bundled id or a name for a user's file.
        level: the bundled level, if any.

    Returns:
        The `Problem`, with declarations read and checked.

    Raises:
        ProblemFormatError: oversized source, a syntax error, a missing required name or a
            malformed declaration; the message says what to fix.
    """
    size = len(source.encode())
    if size > MAX_SOURCE_BYTES:
        raise ProblemFormatError(f"source is {size} bytes; the limit is {MAX_SOURCE_BYTES}")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProblemFormatError(f"syntax error at line {exc.lineno}: {exc.msg}") from None
    names = _defined_names(tree)
    missing = [n for n in REQUIRED_NAMES if n not in names]
    if missing:
        raise ProblemFormatError(missing_names_message(missing, names))
    decl = _literal_assignments(tree)
    try:
        mode = Mode(_choice(Mode, decl.get("MODE", "train")))
        policy = Policy(_choice(Policy, decl.get("POLICY", "mixed")))
    except ValueError as exc:
        raise ProblemFormatError(f"{exc}; MODE is 'train' or 'eval', POLICY 'mixed' or 'pure'") from None
    extra = decl.get("EXTRA_SHAPES", [])
    if not isinstance(extra, (list, tuple)):
        raise ProblemFormatError("EXTRA_SHAPES must be a list of dicts")
    description = decl.get("DESCRIPTION") or (ast.get_docstring(tree) or "").strip().split("\n")[0]
    return Problem(
        id=problem_id,
        source=source,
        mode=mode,
        policy=policy,
        atol=_number("ATOL", decl.get("ATOL")),
        rtol=_number("RTOL", decl.get("RTOL")),
        cpu_sizes=_check_sizes("CPU_SIZES", decl.get("CPU_SIZES", {}), names),
        extra_shapes=tuple(_check_sizes("EXTRA_SHAPES entry", s, names) for s in extra),
        input_variants=bool(decl.get("INPUT_VARIANTS", True)),
        nondeterministic=bool(decl.get("NONDETERMINISTIC", False)),
        random=bool(decl.get("RANDOM", False)),
        description=str(description),
        level=level,
    )


def read_problem_file(path: Path, *, problem_id: str | None = None) -> Problem:
    """Parse a problem from a file; its id defaults to the file's stem."""
    return parse_problem(path.read_text(), problem_id=problem_id or path.stem)
