"""Bundled problems and the lookup that accepts a bundled id or a file path."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from problems.spec import Problem, ProblemFormatError, parse_problem, read_problem_file

__all__ = ["BUNDLED_DIR", "UnknownProblemError", "bundled_ids", "bundled_problems", "load_problem"]

BUNDLED_DIR = Path(__file__).parent / "bundled"


class UnknownProblemError(LookupError):
    """Neither a bundled id nor an existing file."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        super().__init__(
            f"unknown problem {ref!r}: give a bundled id (see `kernelloop problems list`) "
            "or the path of a problem file"
        )


def _id_for(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@cache
def bundled_problems() -> tuple[Problem, ...]:
    """Every bundled problem, ordered by level then name."""
    found = []
    for path in sorted(BUNDLED_DIR.glob("level*/*.py")):
        if path.name.startswith("_"):
            continue
        level = int(path.parent.name.removeprefix("level"))
        found.append(parse_problem(path.read_text(), problem_id=_id_for(path), level=level))
    return tuple(found)


def bundled_ids() -> tuple[str, ...]:
    return tuple(p.id for p in bundled_problems())


def load_problem(ref: str) -> Problem:
    """A bundled problem by id (``level2/conv_bn_scale_train``) or a problem file by path.

    Raises:
        UnknownProblemError: the reference names nothing.
        ProblemFormatError: the file exists but is not a valid problem.
    """
    for problem in bundled_problems():
        if problem.id == ref:
            return problem
    path = Path(ref)
    if path.is_file():
        return read_problem_file(path)
    raise UnknownProblemError(ref)


__all__ += ["ProblemFormatError"]
