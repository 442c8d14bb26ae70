"""CPU timing fidelity: the harness's timing loop against `torch.utils.benchmark.Timer`.

For a ladder of CPU ops from about 20 µs to 100 ms (fp32), in one process, interleaved:

- the harness's metered loop (`harness.meter`, in this process through `harness.sandboxed.localmeter`:
  warm-up, adaptive repeats, each call's inputs scaled afresh; the loop every CPU candidate and
  baseline is timed with), its median;
- ``torch.utils.benchmark.Timer("fn(*inputs)").blocked_autorange(min_run_time=…)`` of the same
  callable and inputs under ``torch.no_grad()``, its median;

and the ratio harness / Timer, best of ``--rounds`` alternations (each figure is the least
disturbed of its rounds; a busy neighbour only ever slows a run down). The machine's load
(``os.getloadavg``, usable cores, torch's threads) is written beside the table, and so are the
harness's own warnings (``noisy`` when the host was loaded).

    .venv/bin/python -m benchmarks.cpu_timing_fidelity --out benchmarks/results/cpu_timing_fidelity

Writes OUT.md and OUT.json. Target (issue 16): within 5 % of the Timer on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from harness.meter.drive import CallPlan
from harness.meter.noise import timing_of
from harness.options import DEFAULT_CACHE_DIR, TimingOptions
from harness.sandboxed.localmeter import time_locally

TARGET = 0.05


def ladder() -> list[tuple[str, Callable[..., Any], list[torch.Tensor]]]:
    """(name, fn, inputs), from tens of microseconds to about 100 ms on one or two cores."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    return [
        ("relu 128k", torch.relu, [rand(1 << 17)]),
        ("gelu 64k", F.gelu, [rand(1 << 16)]),
        ("softmax 64x1k", lambda x: torch.softmax(x, dim=1), [rand(64, 1024)]),
        ("matmul 128", torch.matmul, [rand(128, 128), rand(128, 128)]),
        ("relu 1M", torch.relu, [rand(1 << 20)]),
        ("matmul 256", torch.matmul, [rand(256, 256), rand(256, 256)]),
        ("layernorm 256x4k", lambda x: F.layer_norm(x, (4096,)), [rand(256, 4096)]),
        ("matmul 512", torch.matmul, [rand(512, 512), rand(512, 512)]),
        ("conv2d 8x32x64x64", lambda x, w: F.conv2d(x, w, padding=1), [rand(8, 32, 64, 64), rand(32, 32, 3, 3)]),
        ("matmul 1024", torch.matmul, [rand(1024, 1024), rand(1024, 1024)]),
        ("matmul 1536", torch.matmul, [rand(1536, 1536), rand(1536, 1536)]),
    ]


def timer_median(fn: Callable[..., Any], inputs: list[torch.Tensor], min_run_time: float) -> float:
    with torch.no_grad():
        measurement = Timer("fn(*inputs)", globals={"fn": fn, "inputs": inputs}).blocked_autorange(
            min_run_time=min_run_time)
    return measurement.median * 1e3


def harness_run(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> tuple[float, list[str]]:
    plan = CallPlan.from_timing(TimingOptions(), 1, audits=False, seed_forward=False)
    run = time_locally(fn, [inputs], plan, device=torch.device("cpu"), builds_dir=DEFAULT_CACHE_DIR / "builds")
    timing = timing_of([c.sample_ms for c in run.timed], cuda=False)
    return timing.median_ms, list(timing.warnings)


def machine() -> dict[str, Any]:
    return {"load_avg": os.getloadavg(), "usable_cores": len(os.sched_getaffinity(0)),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
            "host": platform.node(), "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.md and OUT.json")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of harness and Timer per op")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="the Timer's blocked_autorange budget (s)")
    args = parser.parse_args(argv)
    before = machine()
    rows = []
    for name, fn, inputs in ladder():
        harness_ms, timer_ms, warnings = [], [], set()
        for _ in range(args.rounds):
            median, warned = harness_run(fn, inputs)
            harness_ms.append(median)
            warnings.update(warned)
            timer_ms.append(timer_median(fn, inputs, args.min_run_time))
        best_h, best_t = min(harness_ms), min(timer_ms)
        ratio = best_h / best_t
        rows.append({"op": name, "harness_ms": best_h, "timer_ms": best_t, "ratio": ratio,
                     "within_target": abs(ratio - 1) <= TARGET, "harness_rounds_ms": harness_ms,
                     "timer_rounds_ms": timer_ms, "warnings": sorted(warnings)})
        print(f"{name:>20}: harness {best_h:9.4f} ms  Timer {best_t:9.4f} ms  ratio {ratio:.3f}"
              + (f"  [{'; '.join(sorted(warnings))}]" if warnings else ""), flush=True)
    after = machine()
    within = sum(r["within_target"] for r in rows)
    lines = [
        "# CPU timing fidelity: harness vs torch.utils.benchmark.Timer (blocked_autorange)", "",
        f"Host {before['host']} ({before['cpu']}), {before['usable_cores']} usable cores, torch {before['torch']} "
        f"with {before['torch_threads']} threads, Python {before['python']}; {before['at']}.",
        f"Load average (1, 5, 15 min) before: {', '.join(f'{v:.2f}' for v in before['load_avg'])}; after: "
        f"{', '.join(f'{v:.2f}' for v in after['load_avg'])}.", "",
        f"Best of {args.rounds} alternations each; ratio = harness median / Timer median; target ±{TARGET:.0%}: "
        f"{within} of {len(rows)} within.", "",
        "| op | harness ms | Timer ms | ratio | within 5 % | harness warnings |", "|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['op']} | {r['harness_ms']:.4f} | {r['timer_ms']:.4f} | {r['ratio']:.3f} | "
                     f"{'yes' if r['within_target'] else 'no'} | {'; '.join(r['warnings'])} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"before": before, "after": after, "rows": rows}, indent=1))
    print(f"{within} of {len(rows)} within {TARGET:.0%}; wrote {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
