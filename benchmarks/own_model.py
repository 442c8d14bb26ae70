"""A real architecture through profile → extract → apply, with kernels written for its top regions.

    python -m benchmarks.own_model --model resnet18 --target cuda     # the H200 run: torchvision's ResNet-18
    python -m benchmarks.own_model --model gpt2_block --target cuda   # a GPT-2 block from transformers
    python -m benchmarks.own_model --model resnet_mini --target cpu   # the CPU check (a hand-written ResNet)

The model (``benchmarks/own_models/<name>.py``, ``examples/models/<name>.py`` or a path) is profiled
on the target (the profiler, ``torch.compile`` of every region), every region is extracted and
admitted, kernels are written for the regions of the default selection that match a pattern
(`benchmarks.own_model_kernels`: batch norm folded into the convolution with a fused epilogue, layer
norm), and the referee verifies and times the patched model against eager and ``torch.compile`` of
the whole model, side by side in one run, next to what the shares predict. Writes
``results/own_model_<model>_<target>.{json,md}``, and ``patched.py`` with the extracted problems in
``--out`` (default: a temporary folder). Needs only torch (and the model's package) besides the
checkout: the harness's sandboxes do the work.

torchvision does not import beside the CPU build of torch 2.13, so the CPU check uses
``resnet_mini`` (the shape of torchvision's BasicBlock, written by hand).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.own_model_kernels import kernel_for
from harness import HarnessOptions
from harness.modelapply import apply_kernels
from harness.modelextract import extract_regions
from harness.modelsandbox import profile_model
from harness.patchsource import patched_source
from problems import parse_problem
from vocabulary.evaluation import Target
from vocabulary.modelreport import KernelChoice
from vocabulary.regionplan import select_regions

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"


def _model_file(name: str) -> Path:
    for candidate in (Path(name), ROOT / "benchmarks" / "own_models" / f"{name}.py",
                      ROOT / "examples" / "models" / f"{name}.py"):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"no model {name!r}: give a path, or one of benchmarks/own_models/ or examples/models/")


def _fmt(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--target", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--coverage", type=float, default=0.8)
    parser.add_argument("--no-compile-gains", action="store_true", help="skip torch.compile of each region")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None, help="where the problems and patched.py go")
    args = parser.parse_args(argv)
    path = _model_file(args.model)
    model = parse_problem(path.read_text(), problem_id=path.name)
    options = HarnessOptions(**({"cache_dir": args.cache_dir} if args.cache_dir else {}))
    out = args.out or Path(tempfile.mkdtemp(prefix="own-model-"))
    started = time.perf_counter()
    profile = profile_model(model, args.target, options, compile_gains=not args.no_compile_gains)
    profiled_s = time.perf_counter() - started
    extraction = extract_regions(profile, out, model_file=path.name, options=options, coverage=args.coverage)
    selected = select_regions(profile, coverage=args.coverage)
    kernels = {r.name: KernelChoice(source) for r in selected
               if r.name in extraction.admitted and (source := kernel_for(r, args.target)) is not None}
    for name, choice in kernels.items():
        (out / f"{name}_kernel.py").write_text(choice.source)
    print(f"{path.name} on {args.target} ({profile.device}): eager {profile.model_ms:.3f} ms, torch.compile "
          f"{_fmt(profile.compile_ms)} ms; {len(profile.regions)} regions, {len(selected)} selected "
          f"({100 * profile.coverage(r.name for r in selected):.1f} % of the time), kernels for {len(kernels)} "
          f"({100 * profile.coverage(kernels):.1f} %); profiled in {profiled_s:.0f} s", flush=True)
    report = apply_kernels(model, profile, kernels, target=Target(args.target), options=options,
                           model_name=path.name, on_progress=lambda step: print(f"  {step}", flush=True))
    kept = [profile.region(name) for name in report.included]
    if kept:
        (out / "patched.py").write_text(patched_source(model_name=path.name, regions=kept, model_path=path,
                                                       out_path=out / "patched.py",
                                                       kernels={r.name: kernels[r.name].source for r in kept}))
    data = report.to_dict()
    lines = [f"# {path.name} on {args.target} ({profile.device})", "",
             "| region | ops | × | share | eager ms | torch.compile ms | kernel vs eager | vs torch.compile "
             "| in the model |",
             "|---|---|---|---|---|---|---|---|---|"]
    outcomes = {o.name: o for o in report.regions}
    for region in sorted(profile.regions, key=lambda r: r.share, reverse=True)[:15]:
        o = outcomes.get(region.name)
        lines.append(f"| {region.name} | {' '.join(region.ops)} | {len(region.instances)} | {100 * region.share:.1f} % "
                     f"| {_fmt(region.eager_ms)} | {_fmt(region.compile_ms)} | "
                     f"{_fmt(o.speedup_vs_eager if o else None, '.2f', 'x')} | "
                     f"{_fmt(o.speedup_vs_compile if o else None, '.2f', 'x')} | "
                     f"{('kept' if o.included else 'left out: ' + o.reason) if o else 'no kernel'} |")
    verdict = report.verdict
    verdict_text = f"{verdict.status.value}: {verdict.message}" if verdict else "no kernel kept"
    lines += ["", "| whole model | eager ms | torch.compile ms | patched ms | vs eager | vs torch.compile | "
              "predicted (Amdahl) | verdict |", "|---|---|---|---|---|---|---|---|",
              f"| {path.name} | {_fmt(data['eager_ms'])} | {_fmt(data['compile_ms'])} | {_fmt(data['patched_ms'])} | "
              f"{_fmt(data['speedup_vs_eager'], '.3f', 'x')} | {_fmt(data['speedup_vs_compile'], '.3f', 'x')} | "
              f"{_fmt(report.predicted_speedup, '.3f', 'x')} | "
              f"{verdict_text} |"]
    lines += [f"- {note}" for note in report.notes]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    stem = f"own_model_{path.stem}_{args.target}"
    (RESULTS / f"{stem}.md").write_text(text)
    profile_data = profile.to_dict()
    for region in profile_data["regions"]:  # type: ignore[union-attr]
        region.pop("source", None)  # type: ignore[union-attr]
    (RESULTS / f"{stem}.json").write_text(json.dumps({"profile": profile_data, "report": data}, indent=1) + "\n")
    print(f"problems, kernels and patched.py in {out}", flush=True)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
