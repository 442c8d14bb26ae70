"""Executing problem and candidate source as modules, and reporting their errors briefly."""

from __future__ import annotations

import sys
import traceback
import types
from pathlib import Path

from problems.spec import Problem

PROBLEM_MODULE = "kl_problem"
CANDIDATE_MODULE = "kl_candidate"
_TRACE_LIMIT = 4000


def load_module(name: str, source: str, filename: str) -> types.ModuleType:
    """Execute ``source`` as module ``name``; tracebacks point at ``filename``."""
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    code = compile(source, filename, "exec")
    exec(code, module.__dict__)
    return module


def load_problem_module(problem: Problem, target: str) -> types.ModuleType:
    """The problem's module; on ``cpu`` with its ``CPU_SIZES`` set, and every constant derived
    from them recomputed (``input_shape = (batch_size, dim)`` follows ``batch_size``)."""
    module = load_module(PROBLEM_MODULE, problem.source, f"problem:{problem.id}")
    for key, value in problem.size_overrides(target).items():
        setattr(module, key, tuple(value) if isinstance(value, list) else value)
    return module


def load_candidate_module(path: Path) -> types.ModuleType:
    return load_module(CANDIDATE_MODULE, path.read_text(), "candidate.py")


def brief_error(exc: BaseException, *, keep_frames_from: tuple[str, ...] = ("candidate.py", "problem:")) -> str:
    """The exception with only the frames of the user's code (or the last frame if none)."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename.startswith(keep_frames_from)]
    shown = traceback.format_list(mine or frames[-1:])
    text = "".join(shown) + "".join(traceback.format_exception_only(type(exc), exc))
    return text[-_TRACE_LIMIT:]
