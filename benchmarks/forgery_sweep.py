"""Forgery sweep: an honest kernel, then the same kernel forging its figures in its own process by
0.3, 0.5, 0.7 and 0.9, three ways, through the real referee; what each verdict says.

The kernel (a fused GELU-scale-bias over 8 M floats, a C++ loop the compiler vectorises, on the
cpu target; ``--target cuda`` runs a CUDA twin on a GPU) sits at a fraction of its roofline that
the table reports. The ways of forging, each in the candidate's module code:

- ``python``: what Python reaches of the harness in the candidate's process is patched to scale
  what it records (the channel's frame sends, the sandbox's timing op): issue 23's prelude;
- ``loop``: the harness's compiled timing loop is replaced by one written in Python that speaks the
  protocol perfectly (inputs loaded as the real loop loads them, audits answered with sealed memfds
  of the true outputs) and reports each call's true time times the factor;
- ``loop+hide``: the same, with the tamper check replaced too (only the trusted clock is left).

A verdict passes with an inflated figure if it is a ``pass`` whose speedup over eager exceeds the
honest one's by more than the honest run-to-run spread (two honest runs bracket it). The target:
none does.

    .venv/bin/python -m benchmarks.forgery_sweep --out benchmarks/results/forgery_sweep_cpu

Writes OUT.md and OUT.json; about 6 minutes on two cores with the build cached.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from harness import HarnessOptions, Referee, Timeouts, TimingOptions
from harness.options import DEFAULT_CACHE_DIR
from problems.spec import parse_problem
from tests.support.integrity import forged_loop
from vocabulary.evaluation import Depth
from vocabulary.verdict import Status, Verdict

FACTORS = (0.3, 0.5, 0.7, 0.9)
WAYS = ("python", "loop", "loop+hide")

PROBLEM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

n = 1 << 23
CPU_SIZES = {"n": 8388608}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1) * 1.5)
        self.bias = nn.Parameter(torch.zeros(1) + 0.25)

    def forward(self, x):
        return F.gelu(x, approximate="tanh") * self.scale + self.bias


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
'''

CPU_CANDIDATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor gelu_scale_bias(torch::Tensor x, double scale, double bias) {
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = x.numel();
    const float s = (float)scale, b = (float)bias, k = 0.7978845608028654f;
    for (int64_t i = 0; i < n; ++i) {
        float v = in[i];
        float t = std::tanh(k * (v + 0.044715f * v * v * v));
        o[i] = 0.5f * v * (1.0f + t) * s + b;
    }
    return out;
}
"""

_ext = load_inline(name="kl_forgery_sweep_cpu", cpp_sources=SOURCE, functions=["gelu_scale_bias"],
                   extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1) * 1.5)
        self.bias = nn.Parameter(torch.zeros(1) + 0.25)

    def forward(self, x):
        return _ext.gelu_scale_bias(x.contiguous(), float(self.scale), float(self.bias))
'''

CUDA_CANDIDATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <cuda_runtime.h>
__global__ void gelu_scale_bias_kernel(const float* in, float* out, long n, float s, float b) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = in[i];
        float t = tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v));
        out[i] = 0.5f * v * (1.0f + t) * s + b;
    }
}
void launch(const float* in, float* out, long n, float s, float b) {
    gelu_scale_bias_kernel<<<(n + 255) / 256, 256>>>(in, out, n, s, b);
}
"""
CPP = r"""
#include <torch/extension.h>
void launch(const float* in, float* out, long n, float s, float b);
torch::Tensor gelu_scale_bias(torch::Tensor x, double scale, double bias) {
    auto out = torch::empty_like(x);
    launch(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), (float)scale, (float)bias);
    return out;
}
"""
_ext = load_inline(name="kl_forgery_sweep_cuda", cpp_sources=CPP, cuda_sources=CUDA,
                   functions=["gelu_scale_bias"], extra_cflags=["-O1"], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1) * 1.5)
        self.bias = nn.Parameter(torch.zeros(1) + 0.25)

    def forward(self, x):
        return _ext.gelu_scale_bias(x.contiguous(), float(self.scale), float(self.bias))
'''

PYTHON_FORGERY = '''
import struct as _struct, sys as _sys
if "harness.sandboxed.meter" in _sys.modules:  # the candidate sandbox, not the compile sandbox
    _channel = _sys.modules["harness.channel"].Channel
    _send_frame = _channel.send_frame

    def _scaled(self, payload, *, fds=()):
        if payload[:4] == b"KLDN":
            head = bytearray(payload)
            (sample,) = _struct.unpack_from("=d", head, 24)
            _struct.pack_into("=d", head, 24, sample * FACTOR)
            payload = bytes(head)
        return _send_frame(self, payload, fds=fds)

    _channel.send_frame = _scaled
    _role = _sys.modules["harness.sandboxed.roles.candidate"]
    _time_op = _role.Candidate.time
    _role.Candidate.time = lambda self, *a, **k: _time_op(self, *a, **k)
'''


def forged(candidate: str, way: str, factor: float, device: str) -> str:
    if way == "python":
        return candidate + f"\nFACTOR = {factor!r}\n" + PYTHON_FORGERY
    return candidate + forged_loop(factor, hide_tampering=way == "loop+hide", device=device)


def row(name: str, verdict: Verdict) -> dict[str, object]:
    bound = verdict.timing.bound if verdict.timing is not None else None
    return {"case": name, "status": verdict.status.value, "flags": list(verdict.flags),
            "median_ms": verdict.timing.median_ms if verdict.timing else None,
            "speedup_vs_eager": verdict.speedup_vs_eager, "pct_of_sol": verdict.pct_of_sol,
            "excess_us": round(1e3 * bound.excess_ms) if bound else None,
            "allowed_us": round(1e3 * bound.allowed_ms) if bound else None,
            "message": verdict.message[:240]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.forgery_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/forgery_sweep_cpu"))
    args = parser.parse_args(argv)
    # One thread per sandbox, as the tests run them: OpenMP barriers waiting for a descheduled
    # thread on a shared 2-core host swing CPU timings by 10-100x.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    candidate = CPU_CANDIDATE if args.target == "cpu" else CUDA_CANDIDATE
    options = HarnessOptions(cache_dir=args.cache_dir, secret_seed=20261204, trials=2, compile_baseline=False,
                             timing=TimingOptions(max_time_s=1.0, audits=5),
                             timeouts=Timeouts(compile_s=900.0, timing_s=300.0))
    problem = parse_problem(PROBLEM, problem_id="bench/forgery_sweep", level=1)
    started = time.perf_counter()
    rows = []
    with Referee(problem, args.target, options) as referee:
        referee.evaluate(candidate, depth=Depth.COMPILE)
        for name, source in [("honest", candidate), ("honest again", candidate)] + [
                (f"{way} x{factor}", forged(candidate, way, factor, args.target))
                for factor in FACTORS for way in WAYS]:
            result = row(name, referee.evaluate(source))
            rows.append(result)
            print(json.dumps(result), flush=True)
    honest = [r["speedup_vs_eager"] for r in rows[:2] if isinstance(r["speedup_vs_eager"], float)]
    if len(honest) < 2 or any(r["status"] != Status.PASS.value for r in rows[:2]):
        print("the honest kernel did not pass twice: nothing to compare the forgeries with", flush=True)
        return 2
    ceiling = max(honest) * (max(honest) / min(honest)) if honest else 0.0
    inflated = [r["case"] for r in rows[2:] if r["status"] == Status.PASS.value
                and isinstance(r["speedup_vs_eager"], float) and r["speedup_vs_eager"] > ceiling]
    lines = [f"# Forgery sweep ({args.target}, {platform.node()}, load {os.getloadavg()[0]:.1f})", "",
             f"Honest speedup vs eager {', '.join(f'{h:.3f}x' for h in honest)} "
             f"(pct of SOL {rows[0]['pct_of_sol']}); a forgery passes inflated above {ceiling:.3f}x.", "",
             "| case | status | flags | speedup vs eager | median ms | excess / allowed us per call |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        speed = f"{r['speedup_vs_eager']:.3f}x" if isinstance(r["speedup_vs_eager"], float) else "—"
        median = f"{r['median_ms']:.3f}" if isinstance(r["median_ms"], float) else "—"
        lines.append(f"| {r['case']} | {r['status']} | {', '.join(r['flags']) or '—'} | {speed} | {median} | "  # type: ignore[arg-type]
                     f"{r['excess_us']} / {r['allowed_us']} |")
    lines += ["", f"Passed with an inflated figure: {', '.join(inflated) or 'none'}. "
              f"{time.perf_counter() - started:.0f} s.", "",
              f"Rerun: `python -m benchmarks.forgery_sweep --target {args.target} --out {args.out}`"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"rows": rows, "inflated": inflated}, indent=1))
    print("\n".join(lines))
    return 1 if inflated else 0


if __name__ == "__main__":
    raise SystemExit(main())
