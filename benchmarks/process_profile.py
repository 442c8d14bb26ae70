"""Where a command's CPU goes, process by process: every process of the machine sampled by
``perf``, each named by its command line, and (with `benchmarks/pytest_cpu_profile.py`'s records)
counted against the test it served.

`pytest_cpu_profile` counts a test's own CPU and that of the children it reaped; a sandbox reaped by
another process, a server's workers or a compiler run by a builder land elsewhere. This samples the
whole machine instead (``perf record -a``, 20 samples a second per core, each 0.05 CPU-s) while a
logger writes each new process's parent, command line and working directory (``/proc``, every
0.2 s); the report joins the two.

Record (``perf`` must be allowed to sample the whole machine)::

    python benchmarks/process_profile.py record /tmp/pp -- make test

with ``PYTHONPATH=benchmarks PYTEST_ADDOPTS="-p pytest_cpu_profile" CPUPROF_OUT=/tmp/prof`` in the
environment to have tests to count against. Report::

    python benchmarks/process_profile.py report /tmp/pp [--tests /tmp/prof]

It prints CPU-seconds by kind of process (g++, each sandbox role, pytest workers, ...), then each
compiler run (``cc1plus``) with its source file and the test it served, then CPU-seconds per test.
The last results are in `benchmarks/results/test_suite_dev2core.md`.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

#: Seconds of CPU one sample stands for (``perf record -F 20``).
SAMPLE_S = 1 / 20
_PID = re.compile(r"-?\d+/\d+")
_ROLE = re.compile(r"harness\.sandboxed\.roles (\w+)")
_COMMAND = re.compile(r"(?:cli\.(?:main|service|client)|/bin/kernelloop) (\S+)")
_SOURCE = re.compile(r"(\S+\.(?:cpp|cc|cxx|h|hpp))(?:\s|$)")
_XDIST_WORKER = "exec(eval(sys.stdin"


def log_processes(out: Path, stop: Path) -> None:
    """Write a line for each new process (pid, parent, command line, working directory) until
    ``stop`` exists."""
    seen: set[str] = set()
    with out.open("w") as sink:
        while not stop.exists():
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or pid in seen:
                    continue
                try:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
                    cwd = os.readlink(f"/proc/{pid}/cwd")
                except OSError:
                    continue
                seen.add(pid)
                sink.write(json.dumps([int(pid), int(parent), command[:3000], cwd]) + "\n")
            sink.flush()
            time.sleep(0.2)


def record(out: Path, command: list[str]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    stop = out / ".stop"
    stop.unlink(missing_ok=True)
    logger = subprocess.Popen([sys.executable, __file__, "_log", str(out / "processes.jsonl"), str(stop)])
    try:
        return subprocess.run(["perf", "record", "-q", "-a", "-F", "20", "-o", str(out / "perf.data"), "--",
                               *command], check=False).returncode
    finally:
        stop.touch()
        logger.wait(timeout=30)


def samples(out: Path) -> list[tuple[str, int, float]]:
    """(command name, pid, time) of each sample; ``perf script`` is run once and its text kept."""
    text = out / "samples.txt"
    if not text.exists():
        with text.open("w") as sink:
            subprocess.run(["perf", "script", "-i", str(out / "perf.data"), "-F", "pid,tid,comm,time"], stdout=sink,
                           stderr=subprocess.DEVNULL, check=True)
    rows = []
    for line in text.read_text().splitlines():
        parts = line.split()
        at = next((i for i, token in enumerate(parts) if _PID.fullmatch(token)), None)
        if at is None or at + 1 >= len(parts):
            continue
        rows.append((" ".join(parts[:at]), int(parts[at].split("/")[0]), float(parts[-1].rstrip(":"))))
    return rows


def kind(name: str, command: str) -> str:
    """What a process is, from its command name and line."""
    if name == "swapper":
        return "idle"
    if name in ("cc1plus", "cc1", "as", "ld", "collect2"):
        return f"compiler: {name}"
    if role := _ROLE.search(command):
        return f"sandbox: {role.group(1)}"
    if "harness.sandboxed.forkserver" in command:
        return "sandbox: forked (compile, builder, candidate)"
    if _XDIST_WORKER in command:
        return "pytest worker"
    if cli := _COMMAND.search(command):
        return f"kernelloop {cli.group(1)}"
    for word in ("mypy", "compileall", "pip", "celery", "uvicorn", "chrom", "postgres", "redis"):
        if word in command or word in name:
            return word
    return f"other: {name}"


class Processes:
    """The logged processes: command lines, parents, and which pytest worker each descends from."""

    def __init__(self, path: Path) -> None:
        self.command: dict[int, str] = {}
        self.parent: dict[int, int] = {}
        for line in path.read_text().splitlines():
            pid, parent, command, _ = json.loads(line)
            self.command[pid], self.parent[pid] = command, parent
        workers = sorted(p for p, c in self.command.items()
                         if _XDIST_WORKER in c and "pytest" in self.command.get(self.parent[p], ""))
        self.worker_name = {pid: f"gw{i}" for i, pid in enumerate(workers)}

    def worker(self, pid: int) -> str | None:
        for _ in range(30):
            if pid in self.worker_name:
                return self.worker_name[pid]
            if pid not in self.parent:
                return None
            pid = self.parent[pid]
        return None


def test_at(tests: dict[str, tuple[list[float], list[str]]], worker: str | None, at: float) -> str:
    """The test ``worker`` was running at ``at`` (``pytest_cpu_profile``'s records)."""
    if worker is None or worker not in tests:
        return "(no test)"
    starts, names = tests[worker]
    i = bisect.bisect_right(starts, at) - 1
    return names[i] if i >= 0 else "(no test)"


def report(out: Path, tests_dir: Path | None, top: int = 40, min_s: float = 1.0) -> str:
    """The report: kinds of process of ``min_s`` CPU-s or more, the ``top`` compiler runs and tests."""
    processes = Processes(out / "processes.jsonl")
    tests: dict[str, tuple[list[float], list[str]]] = {}
    for path in sorted(tests_dir.glob("*.jsonl")) if tests_dir else ():
        rows = sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["start"])
        tests[path.stem] = ([r["start"] for r in rows], [r["id"] for r in rows])
    by_kind: Counter[str] = Counter()
    by_test: defaultdict[str, Counter[str]] = defaultdict(Counter)
    compiles: dict[int, list[float]] = {}
    for name, pid, at in samples(out):
        what = kind(name, processes.command.get(pid, ""))
        by_kind[what] += 1
        if what != "idle":
            by_test[test_at(tests, processes.worker(pid), at)][what] += 1
        if name == "cc1plus":
            compiles.setdefault(pid, [0.0, at])[0] += 1
    lines = [f"{sum(by_kind.values()) * SAMPLE_S:.0f} CPU-s sampled", "", "| CPU-s | process |", "| ---: | --- |"]
    shown = [(what, n) for what, n in by_kind.most_common() if n * SAMPLE_S >= min_s]
    lines += [f"| {n * SAMPLE_S:.1f} | {what} |" for what, n in shown]
    rest = sum(by_kind.values()) - sum(n for _, n in shown)
    lines.append(f"| {rest * SAMPLE_S:.1f} | the rest (under {min_s:g} CPU-s each) |")
    lines += ["", f"{len(compiles)} compiler runs (cc1plus): CPU-s, source, test", ""]
    for pid, (n, first) in sorted(compiles.items(), key=lambda item: -item[1][0])[:top]:
        found = _SOURCE.findall(processes.command.get(pid, ""))
        source = found[-1].rsplit("/", 1)[-1] if found else "?"
        lines.append(f"{n * SAMPLE_S:6.1f}  {source:40.40s}  {test_at(tests, processes.worker(pid), first)}")
    if tests:
        lines += ["", "CPU-s per test (its sandboxes, compilers and servers included)", ""]
        ranked = sorted(by_test.items(), key=lambda item: -sum(item[1].values()))[:top]
        for test, kinds in ranked:
            parts = ", ".join(f"{what} {n * SAMPLE_S:.1f}" for what, n in kinds.most_common(4))
            lines.append(f"{sum(kinds.values()) * SAMPLE_S:6.1f}  {test}  ({parts})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["_log"]:
        log_processes(Path(args[1]), Path(args[2]))
        return 0
    parser = argparse.ArgumentParser(prog="python benchmarks/process_profile.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run a command under perf and the process logger")
    rec.add_argument("out", type=Path)
    rec.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the command")
    rep = sub.add_parser("report", help="CPU by process kind, compiler runs and tests")
    rep.add_argument("out", type=Path)
    rep.add_argument("--tests", type=Path, default=None, help="pytest_cpu_profile's directory")
    rep.add_argument("--top", type=int, default=40)
    parsed = parser.parse_args(args)
    if parsed.command == "record":
        command = parsed.argv[1:] if parsed.argv[:1] == ["--"] else parsed.argv
        return record(parsed.out, command)
    print(report(parsed.out, parsed.tests, parsed.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
