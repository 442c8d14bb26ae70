"""What the timed calls' audits cost an evaluation on the CPU, side by side in one run.

Two ways, alternating round by round (so load drifts hit both alike), each a warm Referee
(its baselines and the candidate's build done in an uncounted first evaluation):

- **by count** (`TimingOptions.audits` = 10, the default since 2026-12): about 10 audits by the
  ``min_repeats``-th timed call, then ``audits / i`` for call i (`harness.meter.drive.audit_chance`);
- **end only** (``audits=0``): one audited call per input set after the timed ones, which is
  about what a run that stopped early got from the old rate (10 audits spread over the most
  calls a run could make).

Per way: the timing stage's seconds (the audits are compared in it, after the timed calls), the
whole evaluation's wall seconds, and the audits and timed calls of the run. (CPU seconds are not
shown: a Referee's sandboxes are reaped when it closes, not per evaluation.)

    python -m benchmarks.audit_cost --rounds 3   # ~3 min on the 2-core host

Also the comparer's own cost on one 16 MB float32 output (1024 x 4096, as level1/softmax's CPU
size), `compare_outputs` all finite (its quick path) against the same pair with one NaN in both at
one place (its masked path, the one every output took before 2026-12), alternating.

Writes results/audit_cost.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from harness import HarnessOptions, Referee, TimingOptions
from harness.options import default_tolerance
from harness.sandboxed.compare import compare_outputs
from problems import load_problem
from vocabulary.verdict import Status

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results")
#: (problem, candidate): a conv model with its CPU kernel, and a row softmax.
CASES = (("level2/conv_tanh_scale_bias_maxpool", "examples/seed1_cpu.py"),
         ("level1/softmax", "examples/level1/softmax_cpu.py"))
WAYS = {"by count": 10, "end only": 0}


def compare_ms(rounds: int) -> dict[str, float]:
    """Median milliseconds of `compare_outputs` on a 16 MB pair: all finite, and with one NaN in both."""
    torch.manual_seed(0)
    ref = torch.softmax(torch.randn(1024, 4096), dim=-1)
    out = ref + torch.randn_like(ref) * 1e-7
    ref_nan, out_nan = ref.clone(), out.clone()
    ref_nan[0, 0] = out_nan[0, 0] = float("nan")
    pairs = {"all finite": (ref, out), "one NaN in both": (ref_nan, out_nan)}
    times: dict[str, list[float]] = {name: [] for name in pairs}
    for _ in range(5 * rounds):
        for name, (expected, actual) in pairs.items():
            began = time.perf_counter()
            result = compare_outputs([expected], actual, atol=None, rtol=None, tolerance_for=default_tolerance)
            times[name].append((time.perf_counter() - began) * 1e3)
            assert result.passed, result.message
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="kl-audit-cost-"))
    rows: list[dict[str, object]] = []
    for problem_id, candidate_path in CASES:
        source = (REPO / candidate_path).read_text()
        referees = {way: Referee(load_problem(problem_id), "cpu", HarnessOptions(
            cache_dir=cache, secret_seed=7, compile_baseline=False, timing=TimingOptions(audits=audits)))
            for way, audits in WAYS.items()}
        try:
            for way, referee in referees.items():  # baselines and the build, not counted
                warm = referee.evaluate(source)
                assert warm.status is Status.PASS, (way, warm.message)
            figures: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
            for _ in range(args.rounds):
                for way, referee in referees.items():
                    began = time.perf_counter()
                    verdict = referee.evaluate(source)
                    wall = time.perf_counter() - began
                    assert verdict.status is Status.PASS and verdict.timing is not None, (way, verdict.message)
                    bound = verdict.timing.bound
                    figures[way].append({"timing_s": verdict.stage_seconds.timing or 0.0, "wall_s": wall,
                                         "audits": float(bound.audits if bound else 0),
                                         "calls": float(bound.calls if bound else 0)})
        finally:
            for referee in referees.values():
                referee.close()
        for way, runs in figures.items():
            rows.append({"problem": problem_id, "way": way, "runs": runs,
                         **{f"median_{k}": statistics.median(r[k] for r in runs) for k in runs[0]}})
        print(f"{problem_id}: done", flush=True)
    table = ["| problem | way | audits | timed calls | timing stage s | evaluation wall s |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    table += [f"| {r['problem']} | {r['way']} | {r['median_audits']:.0f} | {r['median_calls']:.0f} | "
              f"{r['median_timing_s']:.2f} | {r['median_wall_s']:.2f} |" for r in rows]
    compared = compare_ms(args.rounds)
    table += ["", "| `compare_outputs`, 16 MB float32 | ms |", "| --- | ---: |"]
    table += [f"| {name} | {ms:.1f} |" for name, ms in compared.items()]
    header = (f"# Audits of timed calls: their cost per evaluation (CPU)\n\n"
              f"{platform.node()}, {args.rounds} rounds alternating, medians; "
              f"`python -m benchmarks.audit_cost --rounds {args.rounds}`.\n\n")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "audit_cost.md").write_text(header + "\n".join(table) + "\n")
    (RESULTS / "audit_cost.json").write_text(json.dumps({"evaluations": rows, "compare_ms": compared}, indent=1) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
