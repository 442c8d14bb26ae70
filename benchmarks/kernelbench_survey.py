"""Survey: how a tree of KernelBench problem files fares with kernelloop's problem parser.

For each ``level*/**.py`` under the tree: does it parse; does it set sizes by tuple/list
unpacking; does it derive constants from others; is a ``CPU_SIZES`` naming every integer size
constant accepted, before (names bound by plain ``name = ...`` only, the old rule) and after
(`problems.constants`); and do the derived constants follow an override. With ``--footprint``,
the inputs' size on the meta device (executes the files in this process: use it on a tree you
trust). Nothing is copied or written beside the files.

    .venv/bin/python -m benchmarks.kernelbench_survey /path/to/KernelBench/KernelBench [--footprint]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from problems.constants import module_constants, resolve_overrides
from problems.spec import ProblemFormatError, parse_problem


def _plain_names(tree: ast.Module) -> set[str]:
    """The names the parser used to see: plain ``name = ...`` assignments only."""
    return {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Name)}


def _unpacks(tree: ast.Module) -> bool:
    return any(isinstance(t, (ast.Tuple, ast.List)) for node in tree.body if isinstance(node, ast.Assign)
               for t in node.targets)


def _derived(tree: ast.Module) -> list[str]:
    """Constants whose value reads another module constant."""
    constants = module_constants(tree)
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(n, ast.Name) and n.id in constants
                                                for n in ast.walk(node.value)):
            found += [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return found


def size_constants(constants: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in constants.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 2}


def survey_file(path: Path, footprint: bool) -> dict[str, Any]:
    source = path.read_text()
    row: dict[str, Any] = {"file": f"{path.parent.name}/{path.name}"}
    try:
        parse_problem(source, problem_id=path.stem)
    except ProblemFormatError as exc:
        row["parse_error"] = str(exc)
        return row
    tree = ast.parse(source)
    constants = module_constants(tree)
    sizes = size_constants(constants)
    halved = {k: max(1, v // 2) for k, v in sizes.items()}
    row["unpacks"] = _unpacks(tree)
    derived = _derived(tree)
    row["derived"] = bool(derived)
    row["before_accepted"] = set(sizes) <= _plain_names(tree)
    declared = source + f"\nCPU_SIZES = {halved!r}\nEXTRA_SHAPES = [{halved!r}]\n"
    try:
        problem = parse_problem(declared, problem_id=path.stem)
        row["after_accepted"] = True
        resolved = resolve_overrides(source, problem.cpu_sizes)
        row["derived_follow"] = bool(derived) and all(d in resolved or d in sizes for d in derived if d in constants)
    except ProblemFormatError as exc:
        row["after_accepted"] = False
        row["after_error"] = str(exc)
    if footprint:
        row["input_bytes"] = _input_bytes(path)
    return row


def _input_bytes(path: Path) -> int | None:
    import torch

    from harness.sandboxed.roles.loading import load_module

    try:
        module = load_module("kl_survey", path.read_text(), str(path))
        with torch.device("meta"):
            inputs = module.get_inputs()
        return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    except Exception:  # noqa: BLE001 - a file whose inputs the meta device cannot draw
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tree", type=Path, help="the folder holding level1..level4")
    parser.add_argument("--footprint", action="store_true", help="also measure inputs on the meta device")
    parser.add_argument("--json", type=Path, help="write the per-file rows here")
    args = parser.parse_args(argv)
    files = sorted(args.tree.glob("level*/*.py"))
    rows = [survey_file(f, args.footprint) for f in files]
    counts = Counter()
    for r in rows:
        counts["files"] += 1
        counts["parse"] += "parse_error" not in r
        for key in ("unpacks", "derived", "before_accepted", "after_accepted", "derived_follow"):
            counts[key] += bool(r.get(key))
        if r.get("input_bytes") is not None:
            counts["footprint_known"] += 1
            counts["inputs_over_2GB"] += r["input_bytes"] > 2e9
    print(f"files: {counts['files']}, parse: {counts['parse']}")
    print(f"set sizes by tuple/list unpacking: {counts['unpacks']}")
    print(f"derive constants from others: {counts['derived']}")
    print(f"CPU_SIZES + EXTRA_SHAPES naming every integer size constant accepted: before {counts['before_accepted']}, "
          f"after {counts['after_accepted']}")
    print(f"files whose derived constants follow the override (after): {counts['derived_follow']} "
          f"of {counts['derived']}")
    if args.footprint:
        print(f"inputs measured on meta: {counts['footprint_known']}; over 2 GB: {counts['inputs_over_2GB']}")
    for r in rows:
        if "parse_error" in r or r.get("after_accepted") is False:
            print(f"  {r['file']}: {r.get('parse_error') or r.get('after_error')}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if counts["after_accepted"] == counts["files"] else 1


if __name__ == "__main__":
    sys.exit(main())
