"""``kernelloop replay --export``: one standalone .py (the problem, the kernel, a torch-only check)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cli.client.output import json_object
from display import fmt_ms, fmt_speedup
from problems import Problem
from vocabulary.wire import JsonValue


def _literal(source: str) -> str:
    """``source`` as a Python string literal: a readable raw triple-quoted one when it can be."""
    if "'''" not in source and not source.endswith("\\") and "\r" not in source:
        return "r'''" + source + "'''"
    return repr(source)


_STANDALONE = '''\
"""Standalone check of kernelloop job {job_id}'s best kernel (attempt {attempt_n}) on {problem_name}.

Exported by `kernelloop replay {job_id} --export`. Needs only torch (and a C++/CUDA compiler when
the kernel builds an extension). Runs the problem's reference `Model` and the kernel's `ModelNew`
with the same weights on the same inputs, compares the outputs, then times eager PyTorch,
torch.compile and the kernel (median of several runs).

    python {file_name} [--device cuda|cpu] [--trials 3] [--runs 30] [--no-compile]

The referee's own checks (fresh weights from a secret seed, input variants, integrity checks, a
sandbox) are not repeated here: this file is for reading and reproducing, `kernelloop replay`
for judging. Stored figures of the job ({stored_device}): {stored_summary}.
"""

import argparse
import statistics
import sys
import time
import types

import torch

PROBLEM_ID = {problem_id!r}
MODE = {mode!r}
ATOL = {atol!r}
RTOL = {rtol!r}
#: Sizes the referee uses on the cpu target (module constants of the problem).
CPU_SIZES = {cpu_sizes!r}
#: Tolerance by output dtype when the problem sets none (as the referee's).
TOLERANCE_BY_DTYPE = {{torch.float32: 1e-4, torch.float64: 1e-6, torch.float16: 1e-2, torch.bfloat16: 1e-2}}

PROBLEM_SOURCE = {problem_literal}

CANDIDATE_SOURCE = {candidate_literal}


def load(name, source, sizes=None):
    module = types.ModuleType(name)
    module.__file__ = name + ".py"
    sys.modules[name] = module
    exec(compile(source, name + ".py", "exec"), module.__dict__)
    for key, value in (sizes or {{}}).items():
        setattr(module, key, tuple(value) if isinstance(value, list) else value)
    return module


def flat(output):
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in flat(item)]
    return []


def close(expected, actual):
    for e, a in zip(flat(expected), flat(actual)):
        if e.shape != a.shape or e.dtype != a.dtype:
            return False, f"shape/dtype {{tuple(e.shape)}} {{e.dtype}} vs {{tuple(a.shape)}} {{a.dtype}}"
        tol = TOLERANCE_BY_DTYPE.get(e.dtype, 0.0)
        atol, rtol = (tol if ATOL is None else ATOL), (tol if RTOL is None else RTOL)
        if not torch.allclose(a.double(), e.double(), atol=atol, rtol=rtol, equal_nan=True):
            return False, f"max abs error {{(a.double() - e.double()).abs().max().item():.3g}}"
    return len(flat(expected)) == len(flat(actual)), ""


def inputs(problem, seed, device):
    torch.manual_seed(seed)
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]


def median_ms(fn, args, device, runs):
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        for _ in range(3):
            fn(*args)
        sync()
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            fn(*args)
            sync()
            samples.append(1000 * (time.perf_counter() - start))
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--no-compile", action="store_true", help="skip timing torch.compile")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    problem = load("kl_problem", PROBLEM_SOURCE, CPU_SIZES if device.type == "cpu" else None)
    candidate = load("kl_candidate", CANDIDATE_SOURCE)
    torch.manual_seed(0)
    reference = problem.Model(*problem.get_init_inputs())
    torch.manual_seed(0)
    kernel = candidate.ModelNew(*problem.get_init_inputs())
    kernel.load_state_dict(reference.state_dict(), strict=False)
    for model in (reference, kernel):
        model.train(MODE == "train").to(device)
    ok = True
    for trial in range(args.trials):
        x = inputs(problem, 1000 + trial, device)
        with torch.no_grad():
            passed, why = close(reference(*x), kernel(*x))
        print(f"trial {{trial}}: {{'pass' if passed else 'FAIL ' + why}}")
        ok = ok and passed
    x = inputs(problem, 2000, device)
    eager = median_ms(reference, x, device, args.runs)
    rows = [("eager", eager)]
    if not args.no_compile:
        try:
            compiled = torch.compile(reference)
            rows.append(("torch.compile", median_ms(compiled, x, device, args.runs)))
        except Exception as exc:  # torch.compile needs a compiler toolchain; report, do not fail
            print(f"torch.compile unavailable: {{type(exc).__name__}}: {{exc}}")
    rows.append(("kernel", median_ms(kernel, x, device, args.runs)))
    kernel_ms = rows[-1][1]
    print(f"{{'':<14}} {{'median ms':>10}} {{'kernel speedup':>15}}")
    for name, ms in rows:
        print(f"{{name:<14}} {{ms:>10.4f}} {{ms / kernel_ms:>14.2f}}x")
    print("correct" if ok else "NOT correct", "on", device)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
'''


def export_standalone(
    *, problem: Problem, candidate_source: str, job_id: int, attempt_n: int, stored: Mapping[str, JsonValue],
    path: Path,
) -> None:
    """Write a single .py that checks and times the candidate against the problem with torch only
    (``stored``: the job's Verdict JSON, for the figures it quotes)."""
    summary = (
        f"{fmt_ms(json_object(stored.get('timing')).get('median_ms'))} ms, "
        f"{fmt_speedup(stored.get('speedup_vs_eager'))} vs eager, "
        f"{fmt_speedup(stored.get('speedup_vs_compile'))} vs torch.compile"
    )
    text = _STANDALONE.format(
        job_id=job_id,
        attempt_n=attempt_n,
        problem_name=problem.id,
        file_name=path.name,
        stored_device=json_object(stored.get("provenance")).get("device", "?"),
        stored_summary=summary,
        problem_id=problem.id,
        mode=problem.mode.value,
        atol=problem.atol,
        rtol=problem.rtol,
        cpu_sizes=dict(problem.cpu_sizes),
        problem_literal=_literal(problem.source),
        candidate_literal=_literal(candidate_source),
    )
    path.write_text(text)


