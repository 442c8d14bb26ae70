"""Figures for issue 26 (one vocabulary from the referee to the browser): how many shapes and ways
the service has for the same values, measured the same way before and after.

Prints, for the packages (every top-level package of the service):
- attempt-figure shapes: classes (dataclasses, TypedDicts, pydantic models) declaring three or
  more of an attempt's figures (median_ms, speedup_vs_eager, speedup_vs_compile, pct_of_sol,
  compile_s, correct);
- ways of reading a stored verdict: `Verdict.from_dict`, a `Reader` over a verdict's JSON, and
  subscripts or `.get` on a verdict's JSON (each way's call sites);
- event-type definitions: enums or constants that name job event types;
- problem parses per job: `parse_problem` calls while a worker runs an evaluation job
  (in-process, SQLite, a scripted referee: what the service does before the sandboxes), and the
  requests that make a sandbox parse the source again on receipt;
- modules over 350 lines, per package;
- `dict[str, Any]`, `Any` and `type: ignore` counts;
- with ``--make-test``: `make test`'s wall clock on a fresh clone.

Run from the repository root: `python scripts/vocabulary_figures.py` (`--json` for one JSON line,
`--root DIR` to measure another checkout, e.g. `git worktree add /tmp/at <rev>`).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

FIGURES = {"median_ms", "speedup_vs_eager", "speedup_vs_compile", "pct_of_sol", "compile_s", "correct"}
EVENT_VALUES = {"attempt", "state", "stage", "progress", "message", "trajectory", "cancel_requested", "end"}
ANY = re.compile(r"\bAny\b")
DICT_STR_ANY = re.compile(r"dict\[str,\s*Any\]")
IGNORE = re.compile(r"#\s*type:\s*ignore")
MAX_LINES = 350


def packages(root: Path) -> list[str]:
    found = []
    for child in sorted(root.iterdir()):
        if (child / "__init__.py").is_file() and child.name not in ("tests", "benchmarks", "migrations", "examples"):
            found.append(child.name)
    return found


def package_files(root: Path, names: list[str]) -> dict[str, list[Path]]:
    return {name: sorted(p for p in (root / name).rglob("*.py") if "bundled" not in p.parts) for name in names}


def _fields(node: ast.ClassDef) -> set[str]:
    names = set()
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    return names


def figure_shapes(files: list[Path], root: Path) -> list[str]:
    shapes = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and len(_fields(node) & FIGURES) >= 3:
                shapes.append(f"{path.relative_to(root)}:{node.name}")
    return shapes


def _is_verdict_json(node: ast.expr) -> bool:
    """An expression naming a stored verdict's JSON: ``x.verdict``, ``verdict_json``, ``data["verdict"]``."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("verdict", "verdict_json")
    if isinstance(node, ast.Name):
        return node.id in ("verdict_json", "stored_verdict", "raw_verdict")
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value == "verdict"
    return False


def verdict_reads(files: list[Path], root: Path) -> dict[str, int]:
    ways: Counter[str] = Counter()
    for path in files:
        if path.relative_to(root).parts[0] == "harness" and path.name == "verdict.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                if (isinstance(func, ast.Attribute) and func.attr == "from_dict" and isinstance(func.value, ast.Name)
                        and func.value.id == "Verdict"):
                    ways["Verdict.from_dict"] += 1
                elif (isinstance(func, ast.Name) and func.id == "Reader" and node.args
                      and _is_verdict_json(node.args[0])):
                    ways["Reader over a verdict's JSON"] += 1
                elif (isinstance(func, ast.Attribute) and func.attr == "get" and _is_verdict_json(func.value)):
                    ways["dict access on a verdict's JSON"] += 1
            elif isinstance(node, ast.Subscript) and _is_verdict_json(node.value):
                ways["dict access on a verdict's JSON"] += 1
    return dict(ways)


def event_definitions(files: list[Path], root: Path) -> list[str]:
    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                values = {stmt.value.value for stmt in node.body if isinstance(stmt, ast.Assign)
                          and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)}
                if len(values & EVENT_VALUES) >= 2:
                    found.append(f"{path.relative_to(root)}:{node.name}")
        for stmt in tree.body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id.endswith("_EVENT") and isinstance(stmt.value, ast.Constant)
                    and stmt.value.value in EVENT_VALUES):
                found.append(f"{path.relative_to(root)}:{stmt.targets[0].id}")
    return found


_PARSES = r'''
import sys, tempfile
from pathlib import Path
sys.path.insert(0, {root!r})
import problems.spec as spec
calls = []
real = spec.parse_problem
def counted(*args, **kwargs):
    calls.append(1)
    return real(*args, **kwargs)
spec.parse_problem = counted
import problems, problems.registry
for module in (problems, problems.registry):
    if getattr(module, "parse_problem", None) is real:
        module.parse_problem = counted
try:  # where the verdict lives: the vocabulary since issue 26, the harness before
    from vocabulary.verdict import Stage, Status, Timing, Verdict
except ImportError:
    from harness import Stage, Status, Timing, Verdict
from store import session_scope, make_engine, make_session_factory
from store.migrate import upgrade
from tests.support import worker as support
for name, module in list(sys.modules.items()):
    if getattr(module, "parse_problem", None) is real:
        module.parse_problem = counted
data = Path(tempfile.mkdtemp())
url = f"sqlite:///{{data / 'kl.db'}}"
upgrade(url)
factory = make_session_factory(make_engine(url))
settings = support.make_settings(data_dir=data, database_url=url, cache_dir=data / "cache")
with session_scope(factory) as session:
    job_id = support.evaluation_job(session)
support.claim(factory, job_id)
verdict = Verdict(status=Status.PASS, stage=Stage.DONE, timing=Timing.from_samples([1.0], clock="x"))
calls.clear()
support.run_claimed(settings, factory, job_id, referee_factory=lambda *a: support.ScriptedReferee([verdict]))
print(len(calls))
'''


def problem_parses(root: Path) -> int | None:
    """Parses of the problem while a worker runs one evaluation job (None: this checkout cannot say)."""
    done = subprocess.run([sys.executable, "-c", _PARSES.format(root=str(root))], cwd=root, capture_output=True,
                          text=True, timeout=600)
    try:
        return int(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def sandbox_reparses(root: Path) -> list[str]:
    """Requests that make a sandbox parse the problem's source again on receipt (`request_problem`)."""
    found = []
    for path in sorted((root / "harness" / "protocol").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and "request_problem(" in ast.unparse(node):
                found.append(f"{path.relative_to(root)}:{node.name}")
    return found


def counts(files: list[Path]) -> dict[str, int]:
    text = [p.read_text() for p in files]
    return {"dict[str, Any]": sum(len(DICT_STR_ANY.findall(t)) for t in text),
            "Any": sum(len(ANY.findall(t)) for t in text),
            "type: ignore": sum(len(IGNORE.findall(t)) for t in text)}


def long_modules(by_package: dict[str, list[Path]], root: Path) -> dict[str, list[str]]:
    return {name: [f"{p.relative_to(root)} ({n})" for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES]
            for name, files in by_package.items()}


def make_test_wall(root: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
        started = time.monotonic()
        subprocess.run(["make", "test"], cwd=clone, check=False, env={**os.environ, "PYTHON": sys.executable})
        return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path.cwd())
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--make-test", action="store_true", help="also time `make test` on a fresh clone")
    args = parser.parse_args()
    root = args.root.resolve()
    names = packages(root)
    by_package = package_files(root, names)
    files = [p for group in by_package.values() for p in group]
    figures = {
        "packages": names,
        "attempt_figure_shapes": figure_shapes(files, root),
        "stored_verdict_reads": verdict_reads(files, root),
        "event_type_definitions": event_definitions(files, root),
        "problem_parses_per_job": problem_parses(root),
        "sandbox_requests_reparsing_the_problem": sandbox_reparses(root),
        "modules_over_350_lines": long_modules(by_package, root),
        "counts": counts(files),
    }
    if args.make_test:
        figures["make_test_seconds"] = round(make_test_wall(root))
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"attempt-figure shapes: {len(figures['attempt_figure_shapes'])}")
    for shape in figures["attempt_figure_shapes"]:
        print(f"  {shape}")
    reads = figures["stored_verdict_reads"]
    print(f"ways of reading a stored verdict: {len(reads)} {reads}")
    print(f"event-type definitions: {len(figures['event_type_definitions'])} {figures['event_type_definitions']}")
    print(f"problem parses per job, in the worker: {figures['problem_parses_per_job']}; sandbox requests that parse "
          f"it again: {len(figures['sandbox_requests_reparsing_the_problem'])} "
          f"{figures['sandbox_requests_reparsing_the_problem']}")
    over = figures["modules_over_350_lines"]
    print(f"modules over {MAX_LINES} lines: {sum(len(v) for v in over.values())}")
    for name, modules in over.items():
        if modules:
            print(f"  {name}: {', '.join(modules)}")
    print("counts: " + ", ".join(f"{k} {v}" for k, v in figures["counts"].items()))
    if "make_test_seconds" in figures:
        print(f"make test on a fresh clone: {figures['make_test_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
