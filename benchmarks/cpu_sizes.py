"""Eager milliseconds of every bundled problem at its CPU sizes, as the cpu target times it.

The cpu target runs each problem at its ``CPU_SIZES``, one OpenMP thread per stage. A problem
whose eager forward takes microseconds measures launch overhead, not kernels: every figure of it
(speedups, % of SOL) is noise. This prints each bundled problem's eager time (the fastest
block of ``torch.utils.benchmark``'s ``blocked_autorange`` over ``--repeats`` rounds: a
neighbour's load only ever slows a block down, and on a shared 2-core host medians swung 5x)
and flags those under ``--floor-ms`` (default 1 ms, docs/problems.md).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.cpu_sizes            # every bundled problem
    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.cpu_sizes level1/softmax --repeats 5
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.utils.benchmark as benchmark

from harness.sandboxed.contract import make_inputs, redraw_weights
from harness.sandboxed.roles.loading import load_problem_module
from harness.seeds import plan_trials
from problems import bundled_ids, load_problem

#: The least eager time a bundled problem's CPU sizes should give (docs/problems.md).
FLOOR_MS = 1.0
#: Bundled problems under the floor on purpose, and why (reported, not counted as failures).
KNOWN_UNDER_FLOOR = {
    "level1/depthwise_conv2d": "above 2 MiB of input torch's CPU depthwise 5x5 takes a path 10-50x slower and "
                               "erratic, which would make honest kernels look suspicious",
}


def eager_ms(problem_id: str, repeats: int) -> float:
    """The fastest block's time per forward, over ``repeats`` rounds, at the problem's CPU sizes."""
    problem = load_problem(problem_id)
    module = load_problem_module(problem, "cpu")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    redraw_weights(model, 1)
    model.train(problem.mode.value == "train")
    trial = plan_trials(1, trials=1, input_variants=False, extra_shapes=())[0]
    inputs = make_inputs(module, trial, torch.device("cpu"))
    best = float("inf")
    with torch.no_grad():
        for _ in range(repeats):
            timer = benchmark.Timer("model(*inputs)", globals={"model": model, "inputs": inputs}, num_threads=1)
            best = min(best, min(timer.blocked_autorange(min_run_time=0.3).times) * 1e3)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="*", help="bundled problem ids (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--floor-ms", type=float, default=FLOOR_MS)
    parser.add_argument("--json", action="store_true", help="one JSON object: {problem: eager ms}")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    figures = {pid: eager_ms(pid, args.repeats) for pid in (args.problems or bundled_ids())}
    if args.json:
        print(json.dumps({pid: round(ms, 4) for pid, ms in figures.items()}))
    else:
        for pid, ms in figures.items():
            known = f" (known: {KNOWN_UNDER_FLOOR[pid]})" if pid in KNOWN_UNDER_FLOOR else ""
            print(f"{pid:42s} {ms:9.3f} ms{'   < floor' + known if ms < args.floor_ms else ''}")
    return 1 if any(ms < args.floor_ms and pid not in KNOWN_UNDER_FLOOR for pid, ms in figures.items()) else 0


if __name__ == "__main__":
    sys.exit(main())
