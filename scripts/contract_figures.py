"""Figures for issue 15 (one typed contract): how far the tree is from one shape per value.

Prints, for the packages (agent api cli config display harness problems store worker):
- the number of `dict[str, Any]` annotations,
- the largest module and the largest class in harness/ (lines),
- the public top-level classes/functions whose name is defined in two or more packages,
- the number of `duplicates` pairs with neither side under examples/ or problems/bundled.

Run from the repository root: `python scripts/contract_figures.py` (`--json` for one JSON line).
Measure another commit with `git worktree add /tmp/at <rev>` and `--root /tmp/at`.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path

PACKAGES = ("agent", "api", "cli", "config", "display", "harness", "problems", "store", "vocabulary", "worker")
EXCLUDED_FROM_DUPLICATES = ("examples/", "problems/bundled/")
DICT_STR_ANY = re.compile(r"dict\[str,\s*Any\]")


def package_files(root: Path) -> list[Path]:
    """The packages' Python files, bundled problem sources left out (they are data)."""
    return sorted(
        path
        for package in PACKAGES
        for path in (root / package).rglob("*.py")
        if "bundled" not in path.relative_to(root).parts
    )


def count_dict_str_any(files: list[Path]) -> int:
    return sum(len(DICT_STR_ANY.findall(path.read_text())) for path in files)


def largest_in_harness(root: Path) -> dict[str, object]:
    modules = [(len(p.read_text().splitlines()), str(p.relative_to(root))) for p in (root / "harness").rglob("*.py")]
    classes: list[tuple[int, str]] = []
    for path in (root / "harness").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                end = node.end_lineno or node.lineno
                classes.append((end - node.lineno + 1, f"{path.relative_to(root)}:{node.name}"))
    module_lines, module = max(modules)
    class_lines, cls = max(classes)
    return {"module": module, "module_lines": module_lines, "class": cls, "class_lines": class_lines}


def names_in_two_packages(root: Path, files: list[Path]) -> list[str]:
    packages_of: dict[str, set[str]] = defaultdict(set)
    for path in files:
        package = path.relative_to(root).parts[0]
        for node in ast.parse(path.read_text()).body:
            # Private names (a leading underscore) are each module's own business.
            public = not node.name.startswith("_") if hasattr(node, "name") else False
            if public and isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                packages_of[node.name].add(package)
    return sorted(name for name, packages in packages_of.items() if len(packages) > 1)


def duplicate_pairs(root: Path) -> int:
    out = subprocess.run(
        ["duplicates", "--most", "200", "--seconds", "120", "--repo", str(root)],
        capture_output=True, text=True, check=False,
    ).stdout
    rows = [line for line in out.splitlines() if re.match(r"D\d+ ", line)]
    return sum(1 for row in rows if not any(excluded in row for excluded in EXCLUDED_FROM_DUPLICATES))


def figures(root: Path) -> dict[str, object]:
    files = package_files(root)
    twice = names_in_two_packages(root, files)
    return {
        "dict_str_any": count_dict_str_any(files),
        **largest_in_harness(root),
        "names_in_two_packages": len(twice),
        "names": twice,
        "duplicate_pairs": duplicate_pairs(root),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = figures(args.root.resolve())
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key}: {', '.join(value) if isinstance(value, list) else value}")


if __name__ == "__main__":
    main()
