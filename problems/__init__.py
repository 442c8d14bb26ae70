"""Reference problems: the file format, the bundled set and lookup by id or path.

Nothing here executes problem code; admission checks run inside the harness's sandbox.

Owns: `Problem` (the parsed problem file), the bundled set and its registry, and the types of a
problem's values: `problems.constants.Constant` / `Constants` (module constants, ``CPU_SIZES``
and ``EXTRA_SHAPES`` overrides), `problems.spec.ProblemFields` (its JSON form).
May import: the standard library only (problem code is parsed, never run here; `harness` imports
this package, so its JSON types are not used here: these are JSON as they stand).
In and out: a problem file's source comes in; a frozen `Problem` goes out (to the harness as plain
data, to the agent's prompt, to the store as its declarations).
"""

from problems.registry import (
    BUNDLED_DIR,
    UnknownProblemError,
    bundled_ids,
    bundled_problems,
    load_problem,
)
from problems.spec import (
    MAX_SOURCE_BYTES,
    Mode,
    Policy,
    Problem,
    ProblemFormatError,
    parse_problem,
    read_problem_file,
)

__all__ = [
    "BUNDLED_DIR",
    "MAX_SOURCE_BYTES",
    "Mode",
    "Policy",
    "Problem",
    "ProblemFormatError",
    "UnknownProblemError",
    "bundled_ids",
    "bundled_problems",
    "load_problem",
    "parse_problem",
    "read_problem_file",
]
