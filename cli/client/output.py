"""What the client commands share besides HTTP: exit codes, the two consoles, the ``--json`` option,
and lenient reads of the API's JSON for display (`json_object`, `json_items`, `json_count`: a
field of an unexpected type shows as missing instead of failing the command).

Numbers and problem names are formatted by `display` (the dashboard formats them the same way).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from enum import IntEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from display import finite, llm_label, problem_label
from vocabulary.wire import JsonValue

err = Console(stderr=True)
out = Console()
# A pipe or a file gets lines as they are, never wrapped at 80 columns inside a field.
err.soft_wrap, out.soft_wrap = not err.is_terminal, not out.is_terminal


class CliExit(IntEnum):
    """The command line's exit statuses (`cli.client`'s docstring says which command exits how)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    CANCELLED = 3
    #: Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
    INTERRUPTED = 130


#: ``--json`` of every command that prints data: machine-readable JSON on stdout, notes on stderr.
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout instead of tables (messages go to stderr)")]


def print_json(value: JsonValue) -> None:
    """One JSON document on stdout, on one line (``jq`` reads it)."""
    sys.stdout.write(json.dumps(value, default=str) + "\n")
    sys.stdout.flush()


JOB_EXIT_CODES = {"succeeded": CliExit.OK, "failed": CliExit.FAILED, "cancelled": CliExit.CANCELLED}


def json_object(value: JsonValue) -> Mapping[str, JsonValue]:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def json_items(value: JsonValue) -> list[JsonValue]:
    """``value``'s items if it is a JSON list, else none."""
    return list(value) if isinstance(value, list | tuple) else []


def json_count(value: JsonValue) -> int:
    """``value`` as a whole number (a count, tokens, an id); 0 if it is not a number."""
    return int(finite(value) or 0)


_STATUS_COLOURS = {"pass": "green", "fail": "red", "error": "red", "suspicious": "yellow", "cancelled": "dim"}


def status_text(status: str) -> Text:
    return Text(status, style=_STATUS_COLOURS.get(status, "white"))


def job_llm_label(job: Mapping[str, JsonValue]) -> str:
    """`display.llm_label` of a job as the API sends it."""
    profile, model = job.get("llm_profile"), job.get("llm_model")
    return llm_label(profile if isinstance(profile, str) else None, model if isinstance(model, str) else None)


def job_problem_label(job: Mapping[str, JsonValue]) -> str:
    """`display.problem_label` of a job as the API sends it (``GET /jobs/{id}``)."""
    problem = job.get("problem")
    if not isinstance(problem, Mapping):
        problem = {}
    bundled_id = problem.get("bundled_id")
    return problem_label(bundled_id if isinstance(bundled_id, str) else None, str(problem.get("sha256", "")))

