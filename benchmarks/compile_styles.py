"""Compile times by candidate style: the first attempt (cold) and the next one (a kernel-only edit).

Models do not all write candidates the way the playbook asks. This times the referee's compile
stage, as an agent's attempt sees it, for the styles seen in practice:

- ``playbook``: seed 1's fast example (kernels and a C launcher in ``cuda_sources`` with CUDA
  headers only and ``no_implicit_headers=True``; the binding in ``cpp_sources`` at ``-O1``, first
  line ``#include <torch/extension.h>``). *next*: only the kernels change.
- ``kernelbench_flags``: the same split, but the ``load_inline`` call as KernelBench's examples
  write it (``extra_cflags=[""]``, ``extra_ldflags=[""]``, ``verbose=True``: torch's default ``-O0``).
- ``single_cu``: one ``.cu`` that includes ``<torch/extension.h>`` (kernels and the torch wrapper),
  a declaration in ``cpp_sources``, KernelBench's flags: most published kernels look like this.
- ``single_cu_aten``: the same with the ``.cu`` including ``<ATen/core/Tensor.h>`` and the one
  ATen op it uses instead of ``<torch/extension.h>`` (what the feedback suggests when the split is
  not wanted).
- CPU target (``--target cpu``): ``playbook`` (seed 1's CPU example, ``-O3 -fopenmp``),
  ``kernelbench_flags`` (the same with ``extra_cflags=[""]``) and ``o2`` (``-O2 -fopenmp``, which
  shares the prompted flags' precompiled header). A CPU extension is one translation unit, so
  *next* rebuilds it (with the header).

Every candidate gets fresh sources (a per-run nonce), and before each compile the script waits
``--think-s`` seconds, standing in for the model writing it, while the referee's prestarted sandboxes
come up. First the worker's start-up warm-up (`harness.warm_headers`) builds the precompiled
headers (timed, not part of any attempt). With ``--before`` the playbook style is also timed with
``trusted_builds`` off (every attempt rebuilds the whole extension in its compile sandbox, as before
issue 18). ``--helps`` adds direct nvcc timings of the single ``.cu`` with other includes and
options, and ``ccache`` (where installed) for the binding, against the builder's object copy.

    python -m benchmarks.compile_styles --target cuda --out benchmarks/results/compile_styles_<host>.md
    python -m benchmarks.compile_styles --target cpu --out benchmarks/results/compile_styles_cpu_<host>.md

Needs only torch (a CUDA build for ``--target cuda``; no GPU: compiles run without one) and the
harness. Writes ``<out>`` (markdown) and ``<out minus .md>.json`` (everything).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import secrets
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness import HarnessOptions, Referee, warm_headers  # noqa: E402
from problems import load_problem  # noqa: E402
from vocabulary.evaluation import Depth  # noqa: E402

_PROBLEM = "level2/conv_tanh_scale_bias_maxpool"

_KERNEL = r"""
__global__ void scale_bias_tanh_kernel(const float* __restrict__ x, const float* __restrict__ b, float* __restrict__ y,
                                       float scale, long n, long inner, long channels) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        long c = (i / inner) % channels;
        y[i] = tanhf(x[i]) * scale + b[c];  // NONCE
    }
}
"""

#: KernelBench's own style: one .cu with the torch wrapper, a declaration in cpp_sources.
_SINGLE_CU = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
""" + _KERNEL + r"""
torch::Tensor scale_bias_tanh(torch::Tensor x, torch::Tensor b, double scale) {
    auto y = torch::empty_like(x);
    long n = x.numel(), inner = x.size(2) * x.size(3), channels = x.size(1);
    int threads = 256;
    scale_bias_tanh_kernel<<<(n + threads - 1) / threads, threads>>>(
        x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), (float)scale, n, inner, channels);
    return y;
}
"""

#: The same wrapper with ATen's core header and the one op it uses.
_SINGLE_CU_ATEN = _SINGLE_CU.replace("#include <torch/extension.h>\n",
                                     "#include <ATen/core/Tensor.h>\n#include <ATen/ops/empty_like.h>\n").replace(
    "torch::Tensor", "at::Tensor").replace("torch::empty_like", "at::empty_like")

_DECLARATION = "torch::Tensor scale_bias_tanh(torch::Tensor x, torch::Tensor b, double scale);"

_SINGLE_MODEL = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""{cuda}"""
cpp_source = "{cpp}"

ext = load_inline(name="{name}", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["scale_bias_tanh"],
                  verbose=True, extra_cflags=[""], extra_ldflags=[""])


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor, bias_shape, pool_kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor
        self.pool = nn.MaxPool2d(pool_kernel_size)

    def forward(self, x):
        y = ext.scale_bias_tanh(self.conv(x).contiguous(), self.bias.reshape(-1).contiguous(), self.scaling_factor)
        return self.pool(y)
'''


def _playbook(nonce: str, kernel_nonce: str, *, kernelbench_flags: bool = False) -> str:
    """Seed 1's CUDA example with new sources (nonce comments), optionally KernelBench's call."""
    source = (REPO / "examples" / "seed1_cuda.py").read_text()
    source = source.replace("#include <torch/extension.h>\n", f"#include <torch/extension.h>\n// {nonce}\n", 1)
    source = source.replace("#include <cuda_runtime.h>\n", f"#include <cuda_runtime.h>\n// {kernel_nonce}\n", 1)
    if kernelbench_flags:
        source = re.sub(r'extra_cflags=\["-O1"\],', 'extra_cflags=[""], extra_ldflags=[""], verbose=True,', source)
    return source


def _cpu(nonce: str, flags: str) -> str:
    source = (REPO / "examples" / "seed1_cpu.py").read_text()
    source = source.replace("#include <torch/extension.h>\n", f"#include <torch/extension.h>\n// {nonce}\n", 1)
    return re.sub(r'extra_cflags=\[[^\]]*\]', f"extra_cflags={flags}", source, count=1)


def _single(nonce: str, kernel_nonce: str, *, aten: bool) -> str:
    cuda = (_SINGLE_CU_ATEN if aten else _SINGLE_CU).replace("NONCE", kernel_nonce)
    return _SINGLE_MODEL.format(cuda=cuda, cpp=f"{_DECLARATION} // {nonce}", name=f"kl_single_{nonce}")


def styles(target: str) -> dict[str, Any]:
    """Style name -> a function (cold nonce, kernel nonce) -> candidate source."""
    if target == "cpu":
        return {
            "playbook": lambda n, k: _cpu(n + k, '["-O3", "-fopenmp"]'),
            "kernelbench_flags": lambda n, k: _cpu(n + k, '[""]'),
            "o2": lambda n, k: _cpu(n + k, '["-O2", "-fopenmp"]'),
        }
    return {
        "playbook": lambda n, k: _playbook(n, k),
        "kernelbench_flags": lambda n, k: _playbook(n, k, kernelbench_flags=True),
        "single_cu": lambda n, k: _single(n, k, aten=False),
        "single_cu_aten": lambda n, k: _single(n, k, aten=True),
    }


def _row(style: str, attempt: str, wall: float, verdict: Any, trusted: bool) -> dict[str, Any]:
    compiled = verdict.compile
    row: dict[str, Any] = {"style": style, "attempt": attempt, "trusted_builds": trusted, "wall_s": round(wall, 2),
                           "status": verdict.status.value, "stage_s": compiled.seconds if compiled else None}
    if compiled is not None:
        ext = compiled.extensions[0].to_dict() if compiled.extensions else {}
        units = {u.get("source"): u for u in ext.get("units", [])}
        pch = ext.get("pch") or {}
        row.update(pch=pch.get("status"), pch_reason=pch.get("reason"), via=ext.get("via"),
                   main_s=units.get("main.cpp", {}).get("seconds"), cuda_s=units.get("cuda.cu", {}).get("seconds"),
                   reused=[s for s, u in units.items() if u.get("reused")])
        if not compiled.ok:
            row["errors"] = compiled.errors[-800:]
    return row


def _load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
        return f"{one:.1f} / {five:.1f} / {fifteen:.1f}"
    except OSError:
        return "?"


def run_styles(target: str, cache: Path, *, think_s: float, nexts: int, only: set[str], before: bool,
               limit_s: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    variants = [(name, make, True) for name, make in styles(target).items() if not only or name in only]
    if before and (not only or only & {"playbook", "before"}):
        variants.append(("playbook", styles(target)["playbook"], False))
    problem = load_problem(_PROBLEM)
    for name, make, trusted in variants:
        if time.monotonic() - started > limit_s:
            rows.append({"style": name, "attempt": "skipped", "trusted_builds": trusted, "note": "time limit"})
            continue
        options = HarnessOptions(cache_dir=cache, secret_seed=1, compile_baseline=False, trusted_builds=trusted)
        nonce = secrets.token_hex(4)
        with Referee(problem, target, options) as referee:
            # No extension: its end starts the next attempt's sandboxes, as a previous attempt's would.
            referee.evaluate("import torch\n", depth=Depth.COMPILE)
            # Fresh kernels too (per run and style): an identical cuda.cu would be reused, not compiled.
            attempts = [("cold", nonce, f"{nonce}-k0")] + [(f"next {i + 1}", nonce, f"{nonce}-k{i + 1}")
                                                          for i in range(nexts)]
            for attempt, n, k in attempts:
                time.sleep(think_s)
                source = make(n, k)
                t0 = time.perf_counter()
                verdict = referee.evaluate(source, depth=Depth.COMPILE)
                rows.append(_row(name, attempt, time.perf_counter() - t0, verdict, trusted))
                rows[-1]["load"] = _load()
                print(json.dumps(rows[-1]), flush=True)
    return rows


def _builds(cache: Path, pattern: str) -> list[Path]:
    """The ninja files of the cache's builds matching ``pattern`` (the builder's and the sandboxes'),
    oldest first."""
    found = [*(cache / "builds").glob(f"{pattern}/build.ninja"), *(cache / "builds").glob(f"*/{pattern}/build.ninja")]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def _nvcc_flags(build_dir: Path) -> list[str]:
    line = next(ln for ln in (build_dir / "build.ninja").read_text().splitlines() if ln.startswith("cuda_cflags ="))
    return shlex.split(line.removeprefix("cuda_cflags ="))


def what_helps(cache: Path) -> list[dict[str, Any]]:
    """Direct nvcc timings of the single-.cu style with other includes and options (trusted code,
    one at a time), then (`_ccache`) ccache's hit on the binding against the builder's object copy."""
    rows: list[dict[str, Any]] = []
    builds = _builds(cache, "kl_single_*")
    if not builds:
        return [{"variant": "skipped", "note": "no single_cu build to take nvcc's flags from"}]
    flags = [f for f in _nvcc_flags(builds[-1].parent) if not f.startswith("-DTORCH_EXTENSION_NAME")]
    nvcc = shutil.which("nvcc") or "nvcc"
    cuda_home = os.environ.get("CUDA_HOME")
    if cuda_home:
        nvcc = str(Path(cuda_home) / "bin" / "nvcc")
    variants = [
        ("torch/extension.h (as written)", _SINGLE_CU, []),
        ("ATen/core/Tensor.h + ATen/ops/empty_like.h", _SINGLE_CU_ATEN, []),
        ("torch/extension.h, -Xcompiler -O0 (host side unoptimised)", _SINGLE_CU, ["-Xcompiler", "-O0"]),
        ("torch/extension.h, --threads 2", _SINGLE_CU, ["--threads", "2"]),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for label, text, extra in variants:
            path = Path(tmp) / "k.cu"
            path.write_text(text.replace("NONCE", secrets.token_hex(4)))
            t0 = time.perf_counter()
            done = subprocess.run([nvcc, *flags, "-DTORCH_EXTENSION_NAME=kl_helps", *extra, "-c", str(path),
                                   "-o", str(Path(tmp) / "k.o")], capture_output=True, text=True, check=False)
            rows.append({"variant": f"nvcc: {label}", "seconds": round(time.perf_counter() - t0, 2),
                         "ok": done.returncode == 0, "load": _load(), **({} if done.returncode == 0 else
                                                                          {"error": done.stderr[-400:]})})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _ccache(cache: Path) -> list[dict[str, Any]]:
    """ccache on the playbook binding (cold, then a hit) beside the builder's reuse (a copy)."""
    ccache = shutil.which("ccache")
    builds = _builds(cache, "kl_seed1_cuda-*") or _builds(cache, "kl_seed1_cpu-*")
    if ccache is None or not builds:
        return [{"variant": "ccache", "note": "ccache not installed" if ccache is None else "no playbook build"}]
    build = builds[-1].parent
    line = next(ln for ln in (build / "build.ninja").read_text().splitlines() if ln.startswith("cflags ="))
    cflags = shlex.split(line.removeprefix("cflags ="))
    rows = []
    # With our precompiled header (ccache needs sloppiness for it) and without (ccache instead of it).
    no_pch = [f for f in cflags if "/pch/" not in f and "invalid-pch" not in f]
    with tempfile.TemporaryDirectory() as tmp:
        for label, flags in (("with the PCH", cflags), ("without the PCH", no_pch)):
            env = {**os.environ, "CCACHE_DIR": str(Path(tmp) / f"ccache-{len(flags)}"),
                   "CCACHE_SLOPPINESS": "pch_defines,time_macros,include_file_mtime,include_file_ctime"}
            for what in ("cold (g++ + store)", "hit"):
                t0 = time.perf_counter()
                done = subprocess.run([ccache, "g++", *flags, "-c", str(build / "main.cpp"), "-o",
                                       str(Path(tmp) / "m.o")], capture_output=True, text=True, env=env, check=False)
                rows.append({"variant": f"binding main.cpp, ccache {label}: {what}",
                             "seconds": round(time.perf_counter() - t0, 2), "ok": done.returncode == 0,
                             "load": _load()})
                print(json.dumps(rows[-1]), flush=True)
            stats = subprocess.run([ccache, "--print-stats"], capture_output=True, text=True, env=env, check=False)
            wanted = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss", "could_not_use")
            hits = [ln for ln in stats.stdout.splitlines() if ln.startswith(wanted)]
            rows[-1]["stats"] = " ".join(hits)
        t0 = time.perf_counter()
        shutil.copy2(build / "main.o", Path(tmp) / "copy.o")
        rows.append({"variant": "binding main.cpp: builder's object reuse (copy)",
                     "seconds": round(time.perf_counter() - t0, 3), "ok": True, "load": _load()})
    return rows


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def to_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Compile times by candidate style ({report['host']})", "",
             f"Target `{report['target']}`; think time {report['think_s']} s before each attempt; load average "
             f"(1/5/15 min) at the start {report['load_start']}, at the end {report['load_end']}.",
             f"Start-up warm-up of the precompiled headers (`warm_headers`, once per cache, not in any attempt): "
             f"{report['warmup_s']} s ({'in place' if report['warmup_ok'] else 'not all in place'}).",
             *([f"Note: {report['note']}."] if report.get("note") else []), "",
             "| style | attempt | trusted builds | stage wall (s) | inside sandbox (s) | g++ main.cpp (s) "
             "| nvcc cuda.cu (s) | reused | PCH | status | load |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in report["styles"]:
        if r.get("attempt") == "skipped":
            lines.append(f"| {r['style']} | skipped ({r.get('note')}) | | | | | | | | | |")
            continue
        lines.append(f"| {r['style']} | {r['attempt']} | {'yes' if r['trusted_builds'] else 'no (before)'} "
                     f"| {r['wall_s']} | {_s(r.get('stage_s'))} | {_s(r.get('main_s'))} | {_s(r.get('cuda_s'))} "
                     f"| {', '.join(r.get('reused') or []) or '-'} | {r.get('pch') or '-'} | {r['status']} "
                     f"| {r.get('load')} |")
    walls = [r["wall_s"] for r in report["styles"] if r.get("trusted_builds") and "wall_s" in r]
    if walls:
        lines += ["", f"Median stage wall over this table's attempts with trusted builds (not `iterations.py`'s "
                      f"realistic mix): {statistics.median(walls):.2f} s over {len(walls)} compiles."]
    reasons = sorted({f"{r['style']}: {r['pch_reason']}" for r in report["styles"] if r.get("pch_reason")})
    if reasons:
        lines += ["", "Precompiled headers missed or refused:", *(f"- {reason}" for reason in reasons)]
    errors = sorted({r["errors"].splitlines()[0] for r in report["styles"] if r.get("errors")})
    if errors:
        lines.append(f"Errors: {'; '.join(errors)}.")
    for style in {r["style"] for r in report["styles"]}:
        cold = [r["wall_s"] for r in report["styles"] if r["style"] == style and r.get("attempt") == "cold"
                and r.get("trusted_builds")]
        nxt = [r["wall_s"] for r in report["styles"] if r["style"] == style and str(r.get("attempt")).startswith("next")
               and r.get("trusted_builds")]
        if cold and nxt:
            lines.append(f"- {style}: cold {cold[0]:.1f} s, next attempts median {statistics.median(nxt):.1f} s")
    if report.get("helps"):
        lines += ["", "What helps (direct compiles, trusted code, one at a time):", "",
                  "| variant | seconds | ok | load |", "| --- | --- | --- | --- |"]
        for r in report["helps"]:
            stats = f" ({r['stats']})" if r.get("stats") else ""
            lines.append(f"| {r['variant']} | {r.get('seconds', r.get('note', ''))} | {r.get('ok', '')}{stats} "
                         f"| {r.get('load', '')} |")
    return "\n".join(lines) + "\n"


def _save(report: dict[str, Any], out: str | None) -> str:
    """Write the report as it stands (markdown, and the JSON beside it); return the markdown."""
    report["load_end"] = _load()
    text = to_markdown(report)
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.with_suffix(".json").write_text(json.dumps(report, indent=1))
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", help="the markdown results file (the JSON goes beside it)")
    parser.add_argument("--cache-dir", help="the harness cache (default: a fresh temporary one)")
    parser.add_argument("--think-s", type=float, default=5.0, help="pause before each attempt (sandboxes come up)")
    parser.add_argument("--nexts", type=int, default=2, help="kernel-only edits after each cold attempt")
    parser.add_argument("--only", default="", help="comma-separated styles (\"before\": only --before's run)")
    parser.add_argument("--before", action="store_true", help="also the playbook style with trusted_builds off")
    parser.add_argument("--helps", nargs="?", const="all", choices=["all", "nvcc", "ccache"],
                        help="also direct nvcc variants of the single .cu and/or ccache on the binding")
    parser.add_argument("--limit-s", type=float, default=3000.0, help="start no style after this many seconds")
    args = parser.parse_args(argv)
    import torch

    if args.target == "cuda" and torch.version.cuda is None:
        parser.error("--target cuda needs a CUDA build of torch (no GPU needed)")
    cache = Path(args.cache_dir) if args.cache_dir else Path(tempfile.mkdtemp(prefix="kl-compile-styles-"))
    report: dict[str, Any] = {
        "host": f"{platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}", "target": args.target,
        "think_s": args.think_s, "load_start": _load(), "cache": str(cache),
    }
    t0 = time.perf_counter()
    report["warmup_ok"] = warm_headers(args.target, HarnessOptions(cache_dir=cache))
    report["warmup_s"] = round(time.perf_counter() - t0, 1)
    print(f"warm-up: {report['warmup_s']} s", flush=True)
    only = set(filter(None, args.only.split(",")))
    report["styles"] = run_styles(args.target, cache, think_s=args.think_s, nexts=args.nexts, only=only,
                                  before=args.before, limit_s=args.limit_s)
    _save(report, args.out)  # the styles are kept if the optional part is cut short
    if args.helps and args.target == "cuda":
        report["helps"] = [*(what_helps(cache) if args.helps in ("all", "nvcc") else []),
                           *(_ccache(cache) if args.helps in ("all", "ccache") else [])]
    print(_save(report, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
