"""``/problems``: the bundled reference problems (open: they are public material, no key needed)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from api.errors import NoSuchResource, error_responses
from api.schemas import ProblemDetail, ProblemPublic
from api.services import find_bundled_problem, unknown_problem_message
from problems import bundled_problems

router = APIRouter(prefix="/problems", tags=["problems"])


@router.get("", response_model=list[ProblemPublic], responses=error_responses(422))
def read_problems(
    level: Annotated[int | None, Query(ge=1, le=3, description="Only this level.")] = None,
) -> list[ProblemPublic]:
    """List the bundled problems: ids to pass as `problem_id`, levels, descriptions."""
    return [ProblemPublic.from_problem(p) for p in bundled_problems() if level is None or p.level == level]


@router.get("/{problem_id:path}", response_model=ProblemDetail, responses=error_responses(404, 422))
def read_problem(
    problem_id: Annotated[str, Path(max_length=128, description="A bundled id, e.g. `level1/softmax`.")],
) -> ProblemDetail:
    """One bundled problem: its source and declarations (mode, policy, tolerances, CPU sizes)."""
    problem = find_bundled_problem(problem_id)
    if problem is None:
        raise NoSuchResource(unknown_problem_message(problem_id))
    return ProblemDetail.from_problem(problem)
