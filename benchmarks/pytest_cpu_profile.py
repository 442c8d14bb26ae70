"""Where `make test`'s time goes: each test's wall seconds and the CPU seconds of its process and
the children it reaped, one JSON line per test and pytest-xdist worker; then a table per file.

Record (a pytest plugin; the workers inherit the environment)::

    PYTHONPATH=benchmarks PYTEST_ADDOPTS="-p pytest_cpu_profile" CPUPROF_OUT=/tmp/prof make test

Report::

    python benchmarks/pytest_cpu_profile.py /tmp/prof [FILES]

A sandbox reaped by another process (a prestarted one, a worker's) counts where that one's test
ran; on 4742ab7 the tests held 2,461 of the run's 2,591 CPU-seconds. Wall seconds on two cores
shared by three workers are about 1.5x a test's own. The last results are in
`benchmarks/results/test_suite_dev2core.md`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    started, cpu = time.monotonic(), _cpu_seconds()
    yield
    out = Path(os.environ.get("CPUPROF_OUT", "cpuprof"))
    out.mkdir(parents=True, exist_ok=True)
    row = {"id": item.nodeid, "start": round(started, 1), "wall": round(time.monotonic() - started, 2),
           "cpu": round(_cpu_seconds() - cpu, 2)}
    with (out / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl").open("a") as sink:
        sink.write(json.dumps(row) + "\n")


def report(directory: Path, files: int = 25) -> str:
    rows = [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for row in rows:
        totals = by_file[row["id"].split("::")[0]]
        totals[0] += row["wall"]
        totals[1] += row["cpu"]
        totals[2] += 1
    lines = [f"{len(rows)} tests, {sum(r['wall'] for r in rows):.0f} wall-seconds, "
             f"{sum(r['cpu'] for r in rows):.0f} CPU-seconds counted", "",
             "| wall s | CPU s | tests | file |", "| ---: | ---: | ---: | --- |"]
    for name, (wall, cpu, count) in sorted(by_file.items(), key=lambda item: -item[1][0])[:files]:
        lines.append(f"| {wall:.0f} | {cpu:.0f} | {count:.0f} | `{name}` |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25))
