"""How long a client command takes to start: ``kernelloop jobs --help`` (the command line's imports,
nothing sent) in two checkouts, alternating, with the CPU seconds of each run and the ratio.

    python -m benchmarks.cli_startup --before /tmp/at-old --after . --rounds 7

Each checkout runs with its own interpreter (``<root>/.venv/bin/python``, else this one) and
``PYTHONPATH=<root>``. The last results are in ``benchmarks/results/cli_startup.md``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMAND = ("-m", "cli.main", "jobs", "--help")


def one_run(root: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one start of the command in ``root``."""
    python = root / ".venv" / "bin" / "python"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run([str(python if python.exists() else sys.executable), *COMMAND], cwd=root, check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(root)})
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=Path.cwd())
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    roots = {"before": args.before.resolve(), "after": args.after.resolve()}
    for root in roots.values():
        one_run(root)  # warm the page cache
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in roots}
    for _ in range(args.rounds):
        for name, root in roots.items():
            runs[name].append(one_run(root))
    print(f"`python {' '.join(COMMAND)}`, {args.rounds} alternating rounds, medians")
    print("| checkout | wall s | CPU s |")
    print("| --- | ---: | ---: |")
    medians = {}
    for name, root in roots.items():
        wall = statistics.median(w for w, _ in runs[name])
        cpu = statistics.median(c for _, c in runs[name])
        medians[name] = (wall, cpu)
        print(f"| {name} ({root}) | {wall:.3f} | {cpu:.3f} |")
    (wall_b, cpu_b), (wall_a, cpu_a) = medians["before"], medians["after"]
    print(f"after / before: wall {wall_a / wall_b:.2f}, CPU {cpu_a / cpu_b:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
