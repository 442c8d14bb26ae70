"""What each stage of an evaluation must take at least: the floors the iteration benchmark
(benchmarks/iterations.py) sets beside the measured p50/p95.

A floor is the work the contract needs, priced at the device's own speed, nothing of ours:

- **timing**: the kernel's median × the calls the loop made (every timed call runs the kernel);
- **correctness**: the kernel's median × the trials (each trial runs one forward; the no-op
  substitution trial and the audits are not counted) and, on cuda, the trials' outputs crossing
  the host twice (device → host in the candidate's process, host → device for the comparer) at the
  bandwidth of pinned copies measured here;
- **reference start**: eager's median × the trials (the reference computes each trial's expected
  output when it starts), on a run that started its reference;
- **load**, **baselines**, **compile**: none computed (an import and a model's construction; the
  baselines are cached across a job; the compile runs beside the lane).

Shape trials (``EXTRA_SHAPES``) are left out of the byte count: their outputs are smaller, so the
floor stays a lower bound. Runs with torch (the benchmark's process, never a service's).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from harness.sandboxed.compare import flatten_output
from harness.sandboxed.roles.loading import load_problem_module
from problems import Problem
from vocabulary.verdict import Verdict

__all__ = ["FLOOR_NOTES", "host_device_bandwidth", "output_bytes", "stage_floors"]

FLOOR_NOTES = {
    "reference_start": "eager median × trials (the expected outputs)",
    "correctness": "kernel median × trials, + on cuda the outputs × trials × 2 crossings / pinned bandwidth",
    "timing": "kernel median × calls made",
    "load": "not computed (import and construction)",
    "baselines": "not computed (cached across a job)",
    "compile": "not computed (beside the lane)",
}


def output_bytes(problem: Problem, target: str) -> int | None:
    """Bytes of the problem's output at the target's sizes, from its shapes alone (the meta device:
    nothing computed); None when the model does not run on meta tensors."""
    try:
        module = load_problem_module(problem, target)
        with torch.device("meta"), torch.no_grad():
            model = module.Model(*module.get_init_inputs())
            model.train(problem.mode.value == "train")
            flat = flatten_output(model(*module.get_inputs()))
    except Exception:  # noqa: BLE001 (any model that meta tensors cannot run: no figure)
        return None
    return sum(t.numel() * t.element_size() for t in flat) if flat else None


def _copy_rate(destination: torch.Tensor, source: torch.Tensor, repeats: int) -> float:
    destination.copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        destination.copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    return source.numel() * repeats / (time.perf_counter() - started)


def host_device_bandwidth(megabytes: int = 256, repeats: int = 5) -> float | None:
    """Bytes per second of pinned copies device → host and back (their mean); None without cuda."""
    if not torch.cuda.is_available():
        return None
    on_device = torch.empty(megabytes << 20, dtype=torch.uint8, device="cuda")
    on_host = torch.empty(megabytes << 20, dtype=torch.uint8, pin_memory=True)
    rates = (_copy_rate(on_host, on_device, repeats), _copy_rate(on_device, on_host, repeats))
    del on_device, on_host
    torch.cuda.empty_cache()
    return sum(rates) / len(rates)


def stage_floors(verdict: Verdict, *, out_bytes: int | None, bandwidth: float | None) -> dict[str, Any]:
    """Seconds each stage of ``verdict``'s evaluation needs at least, for the stages it ran and
    where a floor is computed (`FLOOR_NOTES`); with the calls the timing floor counts
    (``timed_calls``) and the transfer's share of the correctness floor (``correctness_transfer``)."""
    floors: dict[str, Any] = {}
    ran = dict(verdict.stage_seconds.items())
    timing = verdict.timing
    kernel_ms = timing.median_ms if timing is not None else None
    eager = verdict.baselines.eager if verdict.baselines is not None else None
    trials = len(verdict.trials)
    main_trials = sum(not t.kind.startswith("shape:") for t in verdict.trials)
    if "timing" in ran and timing is not None and kernel_ms is not None:
        calls = timing.bound.calls if timing.bound is not None else timing.n
        floors["timing"] = kernel_ms * calls / 1000
        floors["timed_calls"] = calls
    if "correctness" in ran and kernel_ms is not None and trials:
        transfer = out_bytes * main_trials * 2 / bandwidth if out_bytes and bandwidth else 0.0
        floors["correctness"] = kernel_ms * trials / 1000 + transfer
        if transfer:
            floors["correctness_transfer"] = transfer
    if "reference_start" in ran and eager is not None and trials:
        floors["reference_start"] = eager.median_ms * trials / 1000
    return {name: round(value, 4) for name, value in floors.items()}
