"""Forked against started sandboxes (`HarnessOptions.fork_server`) on the CPU, side by side in one run.

Two measures, each alternating the two ways round by round (so load drifts hit both alike):

- **starts**: ``--starts`` candidate sandboxes of one pool, one after another, each from
  `SandboxPool.start` to its ready message: the first's wall (forked: the fork server starts
  with it), the others' mean wall, and the CPU seconds per sandbox of all of it (the server's
  start shared among them, as a Referee's attempts share it);
- **attempts**: a Referee evaluating ``--attempts`` distinct candidates of seed problem 1 (the CPU
  seed example with a comment of its own each, so every attempt runs its compile sandbox; the
  extension itself is cached after the first build) to a full verdict: wall and CPU seconds of
  the whole Referee (its sandboxes and the fork server included), per attempt, prestart on.

    python -m benchmarks.sandbox_starts --rounds 3 --attempts 5 --starts 5   # ~3 min on the 2-core host

Writes results/sandbox_starts.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path

from harness import HarnessOptions, Referee
from harness.sandboxpool import SandboxPool, SandboxRole
from problems import load_problem
from vocabulary.evaluation import Target
from vocabulary.verdict import Status

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results")
PROBLEM = "level2/conv_tanh_scale_bias_maxpool"
WAYS = {"forked": True, "started": False}


def _cpu() -> float:
    """CPU seconds of this process and every child it reaped."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure_starts(options: HarnessOptions, runs: Path, count: int) -> tuple[float, float, float]:
    """A Referee's pool starting ``count`` candidate sandboxes one after another, each to ready:
    the first's wall (forked: with its server's start), the others' mean wall, and the CPU per
    sandbox of all of it (the server's start included, reaped at the pool's close)."""
    root = runs / f"start-{time.monotonic_ns()}"
    root.mkdir(parents=True)
    pool = SandboxPool(options, Target.CPU, root)
    walls: list[float] = []
    cpu = _cpu()
    for _ in range(count):
        began = time.perf_counter()
        sandbox = pool.start(SandboxRole.CANDIDATE)
        sandbox.wait_ready(120)
        walls.append(time.perf_counter() - began)
        sandbox.discard()
    pool.close()
    return walls[0], statistics.mean(walls[1:]), (_cpu() - cpu) / count


def measure_attempts(options: HarnessOptions, attempts: int, tag: str) -> tuple[float, float]:
    """Wall and CPU per attempt of a Referee evaluating ``attempts`` distinct candidates."""
    seed = (REPO / "examples" / "seed1_cpu.py").read_text()
    cpu, began = _cpu(), time.perf_counter()
    with Referee(load_problem(PROBLEM), "cpu", options) as referee:
        for n in range(attempts):
            verdict = referee.evaluate(f"{seed}\n# attempt {tag}-{n}\n")
            if verdict.status is not Status.PASS:
                raise SystemExit(f"attempt {n} did not pass: {verdict.message[:500]}")
    return (time.perf_counter() - began) / attempts, (_cpu() - cpu) / attempts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--attempts", type=int, default=6)
    parser.add_argument("--starts", type=int, default=5, help="candidate sandboxes per pool in the start measure")
    parser.add_argument("--cache", type=Path, default=None, help="harness cache (default: a temporary one)")
    args = parser.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="kl-sandbox-starts-"))
    base = HarnessOptions(cache_dir=cache, secret_seed=1, trials=2, compile_baseline=False)
    # The extension, the baselines and the machine's records, before anything is measured.
    measure_attempts(base, 1, "warm")
    keys = ("first_start_s", "next_start_s", "start_cpu_s", "attempt_s", "attempt_cpu_s")
    rows: dict[str, dict[str, list[float]]] = {way: {key: [] for key in keys} for way in WAYS}
    for round_ in range(args.rounds):
        for way, forked in WAYS.items():
            options = base.replace(fork_server=forked)
            figures = (*measure_starts(options, base.runs_dir, args.starts),
                       *measure_attempts(options, args.attempts, f"{round_}-{way}"))
            for key, figure in zip(keys, figures, strict=True):
                rows[way][key].append(figure)
            print(f"round {round_ + 1} {way}: " + ", ".join(f"{k} {v:.3f}" for k, v in zip(keys, figures, strict=True)),
                  flush=True)
    medians = {way: {k: statistics.median(v) for k, v in figures.items()} for way, figures in rows.items()}
    lines = [
        "# Forked against started sandboxes, CPU target (`benchmarks/sandbox_starts.py`)",
        "",
        f"Host: {platform.node()}, {os.cpu_count()} cores; {args.rounds} rounds alternating the two ways; "
        f"{args.attempts} distinct candidates of `{PROBLEM}` per Referee (compile sandbox each, extension cached), "
        "trials 2, no torch.compile baseline, prestart on. Medians of the rounds.",
        "",
        "| measure | forked | started | started / forked |",
        "| --- | ---: | ---: | ---: |",
    ]
    labels = {
        "first_start_s": "a Referee's first candidate sandbox to ready, wall s (forked: with its server's start)",
        "next_start_s": "each further candidate sandbox to ready, wall s",
        "start_cpu_s": f"CPU s per candidate sandbox over {args.starts} (forked: the server's start shared)",
        "attempt_s": "an attempt, wall s",
        "attempt_cpu_s": "an attempt, CPU s (all processes)",
    }
    for key, label in labels.items():
        forked, started = medians["forked"][key], medians["started"][key]
        lines.append(f"| {label} | {forked:.3f} | {started:.3f} | {started / forked:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sandbox_starts.md").write_text(text)
    (RESULTS / "sandbox_starts.json").write_text(json.dumps({"rounds": rows, "medians": medians}, indent=2))


if __name__ == "__main__":
    main()
