"""Where a cold compile and an evaluation's fixed costs go, step by step (trusted code only).

Figures that decide how the playbook's binding is prescribed and what the referee prepays:

- **binding flags**: seed 1's fast example built through the referee's `BuildCache` (build mode,
  precompiled torch header on) with the binding's ``extra_cflags`` at ``-O3`` (the old
  prescription), ``-O1`` and ``-O0``; each variant's PCH is built first (in parallel, not timed
  as a compile), then fresh sources (a nonce comment) are compiled one at a time and ninja's own
  log gives each step: the binding (``main.o``, g++), the kernels (``cuda.cuda.o``, nvcc) and
  the link, which ninja runs with the first two in parallel.
- **process start**: ``import torch`` in a fresh interpreter, CUDA context creation, and the
  cuBLAS/cuDNN handles the candidate sandbox creates before candidate code runs.
- **output transport**: a seed-1-sized output (32 M floats, 128 MB) from the GPU to the comparer
  through a ``torch.save`` file (the old transport) and through a raw file.

    python -m benchmarks.compile_breakdown --out benchmarks/results/compile_breakdown_h200
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

_EXAMPLE = REPO / "examples" / "seed1_cuda.py"
_FLAG_VARIANTS = {"O3": "-O3", "O1": "-O1", "O0": "-O0"}


def _variant_source(flag: str, nonce: str) -> str:
    """Seed 1's fast example with this binding flag and a comment that makes its sources new."""
    source = _EXAMPLE.read_text()
    source = re.sub(r'extra_cflags=\["-O\d"\]', f'extra_cflags=["{flag}"]', source)
    return source.replace("#include <torch/extension.h>\n", f"#include <torch/extension.h>\n// {nonce}\n", 1)


def _ninja_steps(build_dir: Path) -> dict[str, float]:
    """Seconds per output from ninja's log (the last build of each)."""
    steps: dict[str, float] = {}
    log = build_dir / ".ninja_log"
    if not log.is_file():
        return steps
    for line in log.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0].isdigit():
            steps[parts[3]] = (int(parts[1]) - int(parts[0])) / 1e3
    return steps


def _compile_once(root: str, flag: str, nonce: str) -> dict[str, Any]:
    """One build of a variant in this process (build mode, PCH on); the module is imported."""
    from harness.buildcache import BuildCache
    from harness.sandboxed.roles.loading import load_candidate_module

    cache = BuildCache(Path(root), mode="build", arch_list="9.0a", max_jobs=4, pch=True)
    cache.install()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "candidate.py"
        path.write_text(_variant_source(flag, nonce))
        started = time.perf_counter()
        load_candidate_module(path)
        wall = time.perf_counter() - started
    record = cache.records[-1]
    build_dir = Path(root) / f"{record.name}-{record.key}"
    return {"flag": flag, "wall_s": round(wall, 3), "pch": record.pch.to_dict() if record.pch is not None else {},
            "steps": _ninja_steps(build_dir), "call_us": _call_overhead_us(cache.modules[-1])}


def _call_overhead_us(module: Any, calls: int = 5000) -> float | None:
    """Host time per call of the binding on a tiny input: what its optimisation level can change."""
    import torch

    if not torch.cuda.is_available():
        return None
    y, bias = torch.randn(1, 1, 4, 4, device="cuda"), torch.randn(1, device="cuda")
    for _ in range(100):
        module.pool_tanh_scale_bias(y, bias, 2, 1.0)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        module.pool_tanh_scale_bias(y, bias, 2, 1.0)
    torch.cuda.synchronize()
    return round((time.perf_counter() - started) / calls * 1e6, 2)


def _child(root: str, flag: str, nonce: str, queue: Any) -> None:
    try:
        queue.put(_compile_once(root, flag, nonce))
    except BaseException as exc:  # noqa: BLE001 - reported in the results
        queue.put({"flag": flag, "error": f"{type(exc).__name__}: {exc}"[:2000]})


def _in_fresh_process(root: str, flag: str, nonce: str) -> dict[str, Any]:
    """A compile in a fresh interpreter (torch's extension loader caches per process)."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(root, flag, nonce, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def binding_flags(samples: int) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="kl-breakdown-")
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    started = time.perf_counter()
    # PCHs of every variant at once: their first compiles are contended and not reported.
    procs = [ctx.Process(target=_child, args=(root, flag, f"warm-{secrets.token_hex(4)}", queue))
             for flag in _FLAG_VARIANTS.values()]
    for p in procs:
        p.start()
    warm = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    result: dict[str, Any] = {"pch_builds_s": round(time.perf_counter() - started, 1), "warm": warm,
                              "cold": {name: [] for name in _FLAG_VARIANTS}}
    for _ in range(samples):
        for name, flag in _FLAG_VARIANTS.items():
            result["cold"][name].append(_in_fresh_process(root, flag, secrets.token_hex(4)))
    return result


def process_start(samples: int) -> dict[str, Any]:
    code = ("import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); "
            "torch.cuda.init(); torch.empty(1, device='cuda'); t2 = time.perf_counter(); "
            "a = torch.ones(8, 8, device='cuda'); (a @ a).sum().item(); "
            "torch.nn.functional.conv2d(a.view(1, 1, 8, 8), a[:3, :3].reshape(1, 1, 3, 3)).sum().item(); "
            "t3 = time.perf_counter(); print(t1 - t0, t2 - t1, t3 - t2)")
    rows = []
    for _ in range(samples):
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "NVIDIA_TF32_OVERRIDE": "0"})
        total = time.perf_counter() - started
        imp, ctx, vendor = (float(x) for x in out.stdout.split())
        rows.append({"interpreter_total_s": round(total, 3), "import_torch_s": round(imp, 3),
                     "cuda_context_s": round(ctx, 3), "vendor_handles_s": round(vendor, 3)})
    return {"samples": rows}


def transport(samples: int) -> dict[str, Any]:
    import torch

    from harness.sandboxed.transfer import export_output, import_output

    out = torch.randn(128, 16, 125, 125, device="cuda")
    expected = out.numel() * out.element_size()
    rows = []
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        directory = Path(tmp)
        for i in range(samples):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            path = directory / f"s{i}.pt"
            torch.save({"tensors": [out.detach().to("cpu")], "devices": ["cuda"], "single": True}, path)
            t1 = time.perf_counter()
            loaded = torch.load(path, weights_only=True, map_location="cpu")["tensors"][0].to("cuda")
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            desc = export_output(out, directory, f"r{i}")
            t3 = time.perf_counter()
            got = import_output(desc, directory, expected_bytes=expected, device=torch.device("cuda"))
            torch.cuda.synchronize()
            t4 = time.perf_counter()
            assert torch.equal(loaded, out) and torch.equal(got, out)
            rows.append({"torch_save_s": round(t1 - t0, 3), "torch_load_s": round(t2 - t1, 3),
                         "export_s": round(t3 - t2, 3), "import_s": round(t4 - t3, 3),
                         "kind": desc.get("kind")})
    return {"bytes": expected, "samples": rows}


def to_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Compile and start-up breakdown ({report['host']})", ""]
    flags = report.get("binding_flags")
    if flags:
        lines += [f"PCH builds (all variants at once): {flags['pch_builds_s']} s.", "",
                  "| binding flag | load_inline wall (s) | g++ main.o (s) | nvcc cuda.cuda.o (s) | link (s) | pch "
                  "| µs per call |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for name, runs in flags["cold"].items():
            for run in runs:
                if "error" in run:
                    lines.append(f"| {name} | error: {run['error'][:80]} | | | | | |")
                    continue
                steps = run["steps"]
                main = next((v for k, v in steps.items() if k.endswith("main.o")), None)
                cuda = next((v for k, v in steps.items() if k.endswith(".cuda.o")), None)
                link = next((v for k, v in steps.items() if k.endswith(".so")), None)
                lines.append(f"| {name} | {run['wall_s']} | {main} | {cuda} | {link} | {run['pch'].get('status')} "
                             f"| {run.get('call_us')} |")
        lines.append("")
    start = report.get("process_start")
    if start:
        lines += ["| interpreter total (s) | import torch (s) | CUDA context (s) | cuBLAS+cuDNN handles (s) |",
                  "| --- | --- | --- | --- |"]
        lines += [f"| {r['interpreter_total_s']} | {r['import_torch_s']} | {r['cuda_context_s']} | "
                  f"{r['vendor_handles_s']} |" for r in start["samples"]]
        lines.append("")
    moved = report.get("transport")
    if moved:
        lines += [f"Output transport, {moved['bytes'] / 1e6:.0f} MB from the GPU to the comparer:", "",
                  "| torch.save (s) | torch.load + to GPU (s) | export (s) | import (s) | kind |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {r['torch_save_s']} | {r['torch_load_s']} | {r['export_s']} | {r['import_s']} | {r['kind']} |"
                  for r in moved["samples"]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="path prefix of the .md and .json results")
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--skip", default="", help="comma-separated: flags,start,transport")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    import torch

    report: dict[str, Any] = {"host": f"{platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}"}
    if torch.cuda.is_available():
        report["host"] += f", {torch.cuda.get_device_name()}"
    if "start" not in skip and torch.cuda.is_available():
        report["process_start"] = process_start(args.samples + 1)
    if "transport" not in skip and torch.cuda.is_available():
        report["transport"] = transport(args.samples + 1)
    if "flags" not in skip:
        report["binding_flags"] = binding_flags(args.samples)
    text = to_markdown(report)
    print(text)
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps(report, indent=1))
        Path(f"{args.out}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
