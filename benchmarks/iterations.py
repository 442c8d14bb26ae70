"""Iteration speed of the referee: compile times, evaluation walls, attempts per GPU-hour.

An agent attempt pays a compile and an evaluation; this measures both on a stated mix of
candidates, with LLM latency excluded:

- **mix**: the scripted LLM's candidates (draft with a compile error, wrong, slow, fast) of the
  seed problems on the target, which are the examples and variants of them, plus variants of the
  fast examples that change the C++/CUDA source hash (a comment line; on CUDA also the block size):
  20-22 candidates. Several share one extension build byte for byte (as an agent's Python-only edits do).
- **warm-up**: the reference processes started and the eager baselines timed (cached in
  ``--baselines-dir`` across runs), then one compile, before which the referee's trusted warm-up
  sandbox builds the precompiled torch header for the prompted flags (paid once per flag set and
  cache; candidates' own compile sandboxes only use published ones).
- **cold compile**: fresh variants (a per-run nonce comment in the binding) of the candidates that
  follow the prompted split, compiled one at a time (``Depth.COMPILE``), nothing else running.
- **pipeline**: the whole mix as an agent loop would run it: a pool of ``--workers`` threads runs
  the compile stage (``Depth.COMPILE``, cold: nothing of the mix is built yet) while one GPU lane
  evaluates compiled candidates one at a time (``Referee.evaluate`` at ``Depth.BENCHMARK``, the
  reference process alive, baselines cached). Each lane evaluation compiles sources the referee
  has just compiled, so its compile part is the *re-evaluation compile* (no sandbox: the builds are
  known by source hash). Each attempt's seconds per stage are its verdicts' own
  (`Verdict.stage_seconds`: the compile's, then the lane evaluation's), the overhead is the lane
  evaluation's wall beyond its stages, and its kind is `vocabulary.verdict.attempt_kind` (compile
  error, wrong, correct, fast). A candidate whose compile fails ends there (the agent gets the
  errors; its attempt is over). attempts/hour = candidates / pipeline wall * 3600; verdicts per
  lane-hour = candidates / their lane seconds * 3600 (`display.timings`: the p50/p95 table per
  stage and per attempt kind, as the dashboard and ``bench`` show it). Beside each stage's p50, its
  floor where one is computed (`benchmarks.stage_floors`: the kernel's own time × the calls the
  contract needs, the bytes that must cross the host).
- **PCH off** (``--pch-off-samples``): a few cold compiles again with precompiled headers disabled
  (another builds cache, ``HarnessOptions(pch=False)``), for the side-by-side.

Runs with torch and the standard library only (no service dependencies): the scripted LLM's
candidates are read from ``agent/providers/scripted_candidates.py`` by path, without importing ``agent``.
Every phase stops starting new work when ``--limit-s`` is near; what was skipped is reported.

    python -m benchmarks.iterations --target cuda --out benchmarks/results/iterations_cuda --limit-s 330
    python -m benchmarks.iterations --target cpu --max-candidates 3 --cold-samples 1 --pch-off-samples 0
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.stage_floors import FLOOR_NOTES, host_device_bandwidth, output_bytes, stage_floors  # noqa: E402
from display.timings import AttemptSeconds, TimeToVerdict, percentile, time_to_verdict  # noqa: E402
from harness.evaluate import Referee  # noqa: E402
from harness.options import HarnessOptions, TimingOptions  # noqa: E402
from problems.registry import load_problem  # noqa: E402
from vocabulary.evaluation import Depth, Target  # noqa: E402
from vocabulary.stages import StageSeconds  # noqa: E402
from vocabulary.verdict import Verdict, attempt_kind  # noqa: E402

SEED1 = "level2/conv_tanh_scale_bias_maxpool"
SEED2_TRAIN = "level2/conv_bn_scale_train"
SEED2_EVAL = "level2/conv_bn_scale_eval"
_SHORT = {SEED1: "seed1", SEED2_TRAIN: "seed2train", SEED2_EVAL: "seed2eval"}
_TORCH_INCLUDE = "#include <torch/extension.h>\n"
_FAST_EXAMPLES = {
    "cpu": {SEED1: "seed1_cpu.py", SEED2_TRAIN: "seed2_train_cpu.py"},
    "cuda": {SEED1: "seed1_cuda.py", SEED2_TRAIN: "seed2_train_cuda.py", SEED2_EVAL: "seed2_eval_cuda.py"},
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- the mix --------------------------------------------------------------------------------------
@dataclass
class Candidate:
    name: str
    problem: str
    source: str
    #: Follows the prompted split (CUDA: kernels in cuda_sources, binding in cpp_sources; CPU: one
    #: C++ binding file) and compiles: counted in the cold-compile median.
    split: bool
    origin: str
    results: dict[str, Any] = field(default_factory=dict)


def _scripted_candidates() -> Any:
    """``agent/providers/scripted_candidates.py`` loaded by path (``agent`` itself is not imported)."""
    path = REPO / "agent" / "providers" / "scripted_candidates.py"
    spec = importlib.util.spec_from_file_location("_kl_bench_scripted_candidates", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def comment_variant(source: str, note: str) -> str:
    """The source with a comment after its first ``#include <torch/extension.h>``: a new build
    key, the same program (the include stays the binding's first line, as a PCH needs)."""
    if _TORCH_INCLUDE not in source:
        raise ValueError("no #include <torch/extension.h> line to annotate")
    return source.replace(_TORCH_INCLUDE, f"{_TORCH_INCLUDE}// {note}\n", 1)


def build_mix(target: str, examples: Path = REPO / "examples") -> list[Candidate]:
    scripted = _scripted_candidates()
    mix: list[Candidate] = []
    problems = (SEED1, SEED2_TRAIN, SEED2_EVAL)
    for problem in problems:
        for key, build in scripted.CANDIDATES[(problem, target)].items():
            source = build(examples)
            mix.append(Candidate(f"{_SHORT[problem]}/{key}", problem, source, split=key != "draft",
                                 origin=f"scripted LLM's {problem} ({target}) candidate {key!r}"))
    for problem, example in _FAST_EXAMPLES[target].items():
        source = (examples / example).read_text()
        for k in (1, 2) if target == "cuda" else (1, 2, 3, 4):
            mix.append(Candidate(f"{_SHORT[problem]}/fast+comment{k}", problem,
                                 comment_variant(source, f"variant {k}"), split=True,
                                 origin=f"examples/{example} with a comment line in the binding"))
    if target == "cuda":
        source = (examples / "seed1_cuda.py").read_text()
        for threads in (128, 512):
            if "const int threads = 256;" in source:
                mix.append(Candidate(f"seed1/fast+threads{threads}", SEED1,
                                     source.replace("const int threads = 256;", f"const int threads = {threads};"),
                                     split=True, origin=f"examples/seed1_cuda.py with {threads} threads per block"))
    return mix


# -- stage timings --------------------------------------------------------------------------------
def timed_evaluate(referee: Referee, source: str, depth: Depth) -> tuple[Verdict, float, dict[str, float]]:
    """The verdict, its wall, and its seconds per stage (the verdict's own) with the wall beyond
    them as ``overhead``."""
    started = time.perf_counter()
    verdict = referee.evaluate(source, depth)
    wall = time.perf_counter() - started
    spans = verdict.stage_seconds.to_dict()
    spans["overhead"] = round(wall - sum(verdict.stage_seconds.to_dict().values()), 3)
    return verdict, round(wall, 3), spans


def _pch_of(verdict: Verdict) -> str:
    exts = verdict.compile.extensions if verdict.compile else ()
    states = [e.pch.status if e.pch is not None else "-" for e in exts if not e.cached]
    return ",".join(states) or ("cached" if exts else "-")


def _compile_record(verdict: Verdict, wall: float) -> dict[str, Any]:
    exts = verdict.compile.extensions if verdict.compile else ()
    pch_build = sum((e.pch.seconds or 0.0) if e.pch is not None else 0.0 for e in exts)
    return {"status": verdict.status.value, "stage_wall_s": wall,
            "in_stage_s": verdict.compile.seconds if verdict.compile else None,
            "cached": all(e.cached for e in exts) if exts else None,
            "pch": _pch_of(verdict), "pch_build_s": round(pch_build, 3)}


# -- the run --------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.target = Target(args.target)
        self.deadline = time.monotonic() + args.limit_s
        self.nonce = secrets.token_hex(4)
        self.cache = Path(args.cache_dir) if args.cache_dir else Path(tempfile.mkdtemp(prefix="kl-iter-"))
        self.baselines_dir = Path(args.baselines_dir)
        self.report: dict[str, Any] = {"skipped": [], "phases": {}}
        self.referees: dict[str, Referee] = {}
        self.output_bytes: dict[str, int | None] = {}
        #: Pinned host <-> device bytes per second (cuda), for the transfer floors.
        self.bandwidth: float | None = None
        timing = TimingOptions()
        if args.timing_max_s is not None:
            timing = TimingOptions(max_time_s=args.timing_max_s)
        self.options = HarnessOptions(cache_dir=self.cache, secret_seed=20240607, trials=args.trials,
                                      compile_baseline=args.compile_baseline, timing=timing,
                                      max_jobs=args.max_jobs)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def referee(self, problem: str, options: HarnessOptions | None = None) -> Referee:
        if options is not None:
            return Referee(load_problem(problem), self.target, options)
        if problem not in self.referees:
            self.referees[problem] = Referee(load_problem(problem), self.target, self.options)
        return self.referees[problem]

    def floors(self, problem: str, verdict: Verdict) -> dict[str, Any]:
        """`stage_floors` of one lane evaluation (the problem's output bytes computed once)."""
        if problem not in self.output_bytes:
            self.output_bytes[problem] = output_bytes(load_problem(problem), self.target.value)
        return stage_floors(verdict, out_bytes=self.output_bytes[problem], bandwidth=self.bandwidth)

    def close(self) -> None:
        for referee in self.referees.values():
            referee.close()
        if self.baselines_dir and (self.cache / "baselines").is_dir():
            self.baselines_dir.mkdir(parents=True, exist_ok=True)
            for path in (self.cache / "baselines").glob("*.json"):
                shutil.copy2(path, self.baselines_dir / path.name)

    # phase 0 ------------------------------------------------------------------------------------
    def warm_up(self, mix: list[Candidate]) -> None:
        if self.baselines_dir.is_dir():
            (self.cache / "baselines").mkdir(parents=True, exist_ok=True)
            for path in self.baselines_dir.glob("*.json"):
                shutil.copy2(path, self.cache / "baselines" / path.name)
        phase: dict[str, Any] = {"references": {}}
        for problem in dict.fromkeys(c.problem for c in mix):
            started = time.perf_counter()
            referee = self.referee(problem)
            referee.start_reference()
            ref_s = time.perf_counter() - started
            referee.baselines()
            phase["references"][problem] = {"start_s": round(ref_s, 2),
                                            "baselines_s": round(time.perf_counter() - started - ref_s, 2)}
            log(f"reference {problem}: started in {ref_s:.1f} s, baselines in "
                f"{phase['references'][problem]['baselines_s']:.1f} s")
        first = next((c for c in mix if c.split and c.name.endswith("/fast")), None)
        if first is not None and not self.args.no_pch_warm:
            source = comment_variant(first.source, f"pch warm-up {self.nonce}")
            verdict, wall, _ = timed_evaluate(self.referee(first.problem), source, Depth.COMPILE)
            phase["pch_warm_up"] = {"candidate": first.name, **_compile_record(verdict, wall)}
            log(f"PCH warm-up ({first.name}): {verdict.status.value}, compile stage {wall:.1f} s, "
                f"pch {phase['pch_warm_up']['pch']} ({phase['pch_warm_up']['pch_build_s']:.1f} s of it)")
        self.report["phases"]["warm_up"] = phase

    # phase 1 ------------------------------------------------------------------------------------
    def cold_compiles(self, mix: list[Candidate], samples: int, *, pch: bool, label: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        picks = [c for c in mix if c.split and "/fast" in c.name][:samples]
        options = None
        if not pch:
            options = self.options.replace(cache_dir=self.cache / "no-pch", pch=False)
            baselines = self.cache / "baselines"
            if baselines.is_dir():
                shutil.copytree(baselines, options.baselines_dir, dirs_exist_ok=True)
        for candidate in picks:
            if self.left() < self.args.cold_budget_s:
                self.report["skipped"].append(f"{label}: {candidate.name} (time limit)")
                continue
            time.sleep(self.args.think_s)  # the agent writing its next candidate: sandboxes prestart
            source = comment_variant(candidate.source, f"cold {label} {self.nonce}")
            referee = self.referee(candidate.problem, options)
            try:
                verdict, wall, _ = timed_evaluate(referee, source, Depth.COMPILE)
            finally:
                if options is not None:
                    referee.close()
            row = {"candidate": candidate.name, **_compile_record(verdict, wall)}
            rows.append(row)
            log(f"{label} {candidate.name}: {verdict.status.value} in {wall:.1f} s (in sandbox "
                f"{row['in_stage_s']}), pch {row['pch']}")
        return rows

    # phase 2 ------------------------------------------------------------------------------------
    def pipeline(self, mix: list[Candidate]) -> dict[str, Any]:
        workers = self.args.workers
        started = time.perf_counter()
        lock = threading.Lock()
        submitted: list[Candidate] = []

        def compile_one(candidate: Candidate) -> Candidate:
            verdict, wall, _ = timed_evaluate(self.referee(candidate.problem), candidate.source, Depth.COMPILE)
            candidate.results["compile"] = {**_compile_record(verdict, wall),
                                            "finished_at_s": round(time.perf_counter() - started, 2)}
            candidate.results["compile_ok"] = verdict.compile is not None and verdict.compile.ok
            compiled[candidate.name] = verdict.stage_seconds
            if not candidate.results["compile_ok"]:
                candidate.results.update(status=verdict.status.value, message=verdict.message,
                                         kind=attempt_kind(verdict).value, lane_s=0.0,
                                         stage_seconds=verdict.stage_seconds.to_dict())
            with lock:
                log(f"compiled {candidate.name}: {verdict.status.value} in {wall:.1f} s (pch {_pch_of(verdict)})")
            return candidate

        evaluated = 0
        compiled: dict[str, StageSeconds] = {}
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="compile") as pool:
            futures: list[Future[Candidate]] = []
            for candidate in mix:
                futures.append(pool.submit(compile_one, candidate))
                submitted.append(candidate)
            for future in as_completed(futures):
                if future.cancelled():
                    continue
                candidate = future.result()
                if not candidate.results["compile_ok"]:
                    continue  # the attempt ends at its compile error
                if self.left() < self.args.eval_budget_s:
                    self.report["skipped"].append(f"pipeline evaluation: {candidate.name} (time limit)")
                    candidate.results["status"] = "skipped"
                    for other in futures:
                        other.cancel()
                    continue
                verdict, wall, spans = timed_evaluate(self.referee(candidate.problem), candidate.source,
                                                      Depth.BENCHMARK)
                evaluated += 1
                timing = verdict.timing
                both = compiled.get(candidate.name, StageSeconds()).plus(verdict.stage_seconds)
                candidate.results.update(
                    status=verdict.status.value, stage=verdict.stage.value, message=verdict.message[:200],
                    kind=attempt_kind(verdict).value, evaluation_wall_s=wall, overhead_s=spans["overhead"],
                    stage_seconds=both.to_dict(), lane_s=round(verdict.stage_seconds.lane, 3),
                    floors=self.floors(candidate.problem, verdict),
                    reeval_compile={"stage_wall_s": spans.get("compile"),
                                    "in_stage_s": verdict.compile.seconds if verdict.compile else None,
                                    "cached": bool(verdict.compile and verdict.compile.extensions
                                                   and all(e.cached for e in verdict.compile.extensions))},
                    median_ms=timing.median_ms if timing else None, speedup=verdict.speedup_vs_eager,
                    finished_at_s=round(time.perf_counter() - started, 2))
                log(f"evaluated {candidate.name}: {verdict.status.value} ({verdict.stage.value}) in {wall:.1f} s "
                    + " ".join(f"{k}={v:.2f}" for k, v in spans.items()))
        wall = time.perf_counter() - started
        done = [c for c in submitted if c.results.get("status") not in (None, "skipped")]
        table = time_to_verdict(AttemptSeconds(kind=c.results["kind"], stages=c.results["stage_seconds"],
                                               lane_s=c.results["lane_s"]) for c in done)
        return {"workers": workers, "wall_s": round(wall, 2), "attempts": len(done), "evaluated": evaluated,
                "attempts_per_hour": round(len(done) / wall * 3600, 1) if wall > 0 else None,
                "time_to_verdict": table.to_dict(), "floors": floor_table([c.results for c in done])}

    # phase 3 ------------------------------------------------------------------------------------
    def evaluations(self, mix: list[Candidate], samples: int) -> list[dict[str, Any]]:
        """Seed 1's fast candidate evaluated again, nothing else running: the reference alive,
        baselines cached, its build known, and a pause first as the agent's would be."""
        fast = next((c for c in mix if c.name == "seed1/fast"), None)
        rows: list[dict[str, Any]] = []
        for _ in range(samples if fast is not None else 0):
            if self.left() < self.args.eval_budget_s + self.args.think_s:
                self.report["skipped"].append("seed-1 evaluation (time limit)")
                break
            time.sleep(self.args.think_s)
            verdict, wall, spans = timed_evaluate(self.referee(fast.problem), fast.source, Depth.BENCHMARK)
            rows.append({"status": verdict.status.value, "kind": attempt_kind(verdict).value,
                         "evaluation_wall_s": wall, "split_s": spans, "lane_s": round(verdict.stage_seconds.lane, 3),
                         "floors": self.floors(fast.problem, verdict),
                         "median_ms": verdict.timing.median_ms if verdict.timing else None})
            log(f"seed-1 evaluation: {verdict.status.value} in {wall:.1f} s "
                + " ".join(f"{k}={v:.2f}" for k, v in spans.items()))
        return rows

    # the whole run ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        import torch

        mix = build_mix(self.target.value)
        if self.args.only:
            wanted = self.args.only.split(",")
            mix = [c for c in mix if c.name in wanted]
        mix = mix[: self.args.max_candidates or None]
        self.report.update(
            target=self.target.value, nonce=self.nonce, cache_dir=str(self.cache), limit_s=self.args.limit_s,
            host={"node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                  "torch": torch.__version__, "cuda": torch.version.cuda,
                  "gpu": torch.cuda.get_device_name(0) if self.target is Target.CUDA and torch.cuda.is_available()
                  else None},
            options={"workers": self.args.workers, "max_jobs": self.args.max_jobs, "trials": self.args.trials,
                     "compile_baseline": self.args.compile_baseline,
                     "timing_max_s": self.options.timing.max_time_s},
            mix=[{"name": c.name, "problem": c.problem, "split": c.split, "origin": c.origin} for c in mix])
        log(f"{len(mix)} candidates on {self.target.value}; cache {self.cache}; limit {self.args.limit_s:.0f} s")
        if self.target is Target.CUDA:
            self.bandwidth = host_device_bandwidth()
            self.report["host_device_bandwidth_gbs"] = round(self.bandwidth / 1e9, 1) if self.bandwidth else None
        try:
            self.warm_up(mix)
            self.report["phases"]["cold_compile"] = self.cold_compiles(mix, self.args.cold_samples, pch=True,
                                                                       label="cold")
            self.report["phases"]["pipeline"] = self.pipeline(mix)
            self.report["phases"]["seed1_evaluations"] = self.evaluations(mix, self.args.eval_samples)
            self.report["phases"]["cold_compile_pch_off"] = self.cold_compiles(
                mix, self.args.pch_off_samples, pch=False, label="cold-no-pch")
        finally:
            self.close()
        self.report["candidates"] = [{"name": c.name, "problem": c.problem, "split": c.split, **c.results}
                                     for c in mix]
        self.report["summary"] = summarise(self.report)
        return self.report


def pipeline_table(results: list[dict[str, Any]]) -> TimeToVerdict:
    """Time to verdict over the pipeline's attempts (those it judged: a kind each)."""
    return time_to_verdict(AttemptSeconds(kind=r["kind"], stages=r["stage_seconds"], lane_s=r["lane_s"])
                           for r in results if r.get("kind"))


def floor_table(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stage with a floor: the p50 measured and the p50 floor over the attempts that have both."""
    rows = []
    for stage, note in FLOOR_NOTES.items():
        pairs = [(r["stage_seconds"][stage], r["floors"][stage]) for r in results
                 if stage in (r.get("floors") or {}) and stage in (r.get("stage_seconds") or {})]
        if not pairs:
            rows.append({"stage": stage, "n": 0, "floor": note})
            continue
        measured, floors = [m for m, _ in pairs], [f for _, f in pairs]
        rows.append({"stage": stage, "n": len(pairs), "p50_s": round(percentile(measured, 50), 3),
                     "p95_s": round(percentile(measured, 95), 3), "floor_p50_s": round(percentile(floors, 50), 4),
                     "floor": note})
    return rows


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    phases = report["phases"]
    cold = [r for r in phases.get("cold_compile", []) if r["status"] == "pass"]
    cold_off = [r for r in phases.get("cold_compile_pch_off", []) if r["status"] == "pass"]
    cands = report.get("candidates", [])
    evaluated = [c for c in cands if c.get("evaluation_wall_s") is not None]
    seed1 = [c for c in evaluated if c["name"] == "seed1/fast"]
    pipeline = phases.get("pipeline", {})
    seed1_runs = [r for r in phases.get("seed1_evaluations", []) if r["status"] == "pass"]
    return {
        "cold_compile_median_s": _median([r["stage_wall_s"] for r in cold]),
        "cold_compile_in_stage_median_s": _median([r["in_stage_s"] for r in cold]),
        "cold_compile_pch_off_median_s": _median([r["stage_wall_s"] for r in cold_off]),
        "pipeline_cold_compile_median_s": _median(
            [c["compile"]["stage_wall_s"] for c in cands if c.get("split") and c.get("compile")
             and not c["compile"].get("cached")]),
        "reeval_compile_median_s": _median([c["reeval_compile"]["stage_wall_s"] for c in evaluated]),
        "reeval_compile_in_stage_median_s": _median([c["reeval_compile"]["in_stage_s"] for c in evaluated]),
        "evaluation_wall_median_s": _median([c["evaluation_wall_s"] for c in evaluated]),
        "seed1_fast_evaluation_wall_s": seed1[0]["evaluation_wall_s"] if seed1 else None,
        "seed1_evaluation_median_s": _median([r["evaluation_wall_s"] for r in phases.get("seed1_evaluations", [])
                                              if r["status"] == "pass"]),
        "attempts_per_hour": pipeline.get("attempts_per_hour"),
        "verdicts_per_lane_hour": (pipeline.get("time_to_verdict") or {}).get("verdicts_per_lane_hour"),
        "evaluation_lane_median_s": _median([c["lane_s"] for c in evaluated]),
        "seed1_lane_median_s": _median([r["lane_s"] for r in seed1_runs]),
        "pch_build_s": (phases.get("warm_up", {}).get("pch_warm_up") or {}).get("pch_build_s"),
    }


def to_markdown(report: dict[str, Any]) -> str:
    s, host = report["summary"], report["host"]
    lines = [f"# Iteration speed: {report['target']}", "",
             f"Host: {host['node']}, {host['cpus']} CPUs, GPU {host['gpu']}, torch {host['torch']} (CUDA "
             f"{host['cuda']}), Python {host['python']}. Options: {json.dumps(report['options'])}. "
             f"Limit {report['limit_s']:.0f} s.", "",
             "| figure | value |", "| --- | --- |"]
    labels = {
        "cold_compile_median_s": "median cold compile, prompted split, PCH warm (stage wall, s)",
        "cold_compile_in_stage_median_s": "  the same, inside the sandbox (s)",
        "cold_compile_pch_off_median_s": "median cold compile, PCH off (stage wall, s)",
        "pch_build_s": "PCH build, once per flag set (s)",
        "pipeline_cold_compile_median_s": "median cold compile inside the pipeline (contended, s)",
        "reeval_compile_median_s": "median re-evaluation compile (stage wall, s)",
        "reeval_compile_in_stage_median_s": "  the same, inside the sandbox (s)",
        "evaluation_wall_median_s": "median evaluation wall, benchmark depth (s)",
        "seed1_fast_evaluation_wall_s": "seed problem 1 (fast candidate) evaluation wall in the pipeline (s)",
        "seed1_evaluation_median_s": "seed problem 1 (fast candidate) evaluation wall, uncontended, median (s)",
        "attempts_per_hour": "attempts per GPU-hour (pipeline wall)",
        "verdicts_per_lane_hour": "verdicts per lane-hour (pipeline: attempts / their lane seconds)",
        "evaluation_lane_median_s": "median lane seconds of an evaluation (pipeline)",
        "seed1_lane_median_s": "seed problem 1 (fast candidate) lane seconds, uncontended, median",
    }
    lines += [f"| {labels[k]} | {v if v is not None else '-'} |" for k, v in s.items() if k in labels]
    pipe = report["phases"].get("pipeline", {})
    lines += ["", f"Pipeline: {pipe.get('attempts')} attempts ({pipe.get('evaluated')} evaluated) in "
              f"{pipe.get('wall_s')} s with {pipe.get('workers')} compile workers and one evaluation lane.", "",
              "| candidate | compile (s) | pch | kind | status | eval wall (s) | lane (s) | compile stages (s) "
              "| load | correctness | timing | overhead | median ms | speedup |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def f(v: Any) -> str:
        return f"{v:.2f}" if isinstance(v, (int, float)) else "-"

    for c in report["candidates"]:
        comp, sp = c.get("compile") or {}, c.get("stage_seconds") or {}
        lines.append(f"| {c['name']} | {f(comp.get('stage_wall_s'))}{' (cached)' if comp.get('cached') else ''} "
                     f"| {comp.get('pch', '-')} | {c.get('kind', '-')} | {c.get('status', '-')} "
                     f"| {f(c.get('evaluation_wall_s'))} | {f(c.get('lane_s'))} | {f(sp.get('compile'))} "
                     f"| {f(sp.get('load'))} | {f(sp.get('correctness'))} | {f(sp.get('timing'))} "
                     f"| {f(c.get('overhead_s'))} | {f(c.get('median_ms'))} | {f(c.get('speedup'))} |")
    judged = [c for c in report["candidates"] if c.get("kind")]
    if judged:
        lines += ["", "Time to verdict (pipeline), per stage and per attempt kind, from the verdicts' stage seconds:",
                  "", pipeline_table(judged).markdown(by_kind=True)]
        bandwidth = report.get("host_device_bandwidth_gbs")
        lines += ["Floors: what each stage needs at least (`benchmarks/stage_floors.py`)"
                  + (f"; pinned host <-> device copies at {bandwidth} GB/s" if bandwidth else "") + ".", "",
                  "| stage | attempts | p50 s | p95 s | floor p50 s | floor |",
                  "| --- | ---: | ---: | ---: | ---: | --- |"]
        lines += [f"| {r['stage']} | {r['n']} | {f(r.get('p50_s'))} | {f(r.get('p95_s'))} "
                  f"| {r.get('floor_p50_s', '-')} | {r['floor']} |"
                  for r in floor_table(judged)]
    evals = report["phases"].get("seed1_evaluations") or []
    if evals:
        lines += ["", "Seed-1 evaluations, uncontended:", "",
                  "| status | wall (s) | lane (s) | stages (s) | floors (s) | median ms |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {r['status']} | {r['evaluation_wall_s']} | {r['lane_s']} | "
                  + ", ".join(f"{k} {v}" for k, v in r["split_s"].items()) + " | "
                  + ", ".join(f"{k} {v}" for k, v in r["floors"].items()) + f" | {r['median_ms']} |" for r in evals]
    for key, title in (("cold_compile", "Cold compiles (PCH on)"), ("cold_compile_pch_off", "Cold compiles (PCH off)")):
        rows = report["phases"].get(key) or []
        if rows:
            lines += ["", f"{title}:", "", "| candidate | status | stage wall (s) | in sandbox (s) | pch |",
                      "| --- | --- | --- | --- | --- |"]
            lines += [f"| {r['candidate']} | {r['status']} | {r['stage_wall_s']} | {r['in_stage_s']} | {r['pch']} |"
                      for r in rows]
    warm = report["phases"].get("warm_up", {})
    if warm:
        lines += ["", f"Warm-up: {json.dumps(warm)}"]
    if report["skipped"]:
        lines += ["", "Skipped (time limit): " + "; ".join(report["skipped"])]
    lines += ["", "Mix: " + "; ".join(f"{m['name']} ({m['origin']})" for m in report["mix"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", help="path prefix of the .md and .json results "
                        "(default benchmarks/results/iterations_<target>)")
    parser.add_argument("--limit-s", type=float, default=330.0, help="total time bound (default 330 s)")
    parser.add_argument("--workers", type=int, default=max(1, min(4, (os.cpu_count() or 2) // 4)),
                        help="compile pool threads")
    parser.add_argument("--max-jobs", type=int, default=max(1, min(4, os.cpu_count() or 2)),
                        help="ninja jobs per compile")
    parser.add_argument("--max-candidates", type=int, default=0, help="use only the first N of the mix")
    parser.add_argument("--only", help="comma-separated candidate names (e.g. seed1/fast,seed1/wrong)")
    parser.add_argument("--cold-samples", type=int, default=5, help="uncontended cold compiles (PCH on)")
    parser.add_argument("--pch-off-samples", type=int, default=2, help="cold compiles with PCH off")
    parser.add_argument("--eval-samples", type=int, default=3, help="uncontended seed-1 evaluations")
    parser.add_argument("--think-s", type=float, default=5.0,
                        help="pause before each cold compile and seed-1 evaluation, standing in for the LLM "
                        "writing the next candidate (the referee prestarts sandboxes meanwhile; not in any figure)")
    parser.add_argument("--no-pch-warm", action="store_true", help="skip the PCH warm-up compile")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--compile-baseline", action="store_true", help="also time torch.compile baselines")
    parser.add_argument("--timing-max-s", type=float, default=None,
                        help="seconds of timed calls per candidate, at most (default: the harness's)")
    parser.add_argument("--cache-dir", help="harness cache (default: a fresh temporary one, so compiles are cold)")
    parser.add_argument("--baselines-dir", default=str(Path.home() / ".cache" / "kernelloop-bench" / "baselines"),
                        help="baselines kept across runs")
    parser.add_argument("--cold-budget-s", type=float, default=25.0,
                        help="start a cold compile only with this much time left")
    parser.add_argument("--eval-budget-s", type=float, default=15.0,
                        help="start an evaluation only with this much time left")
    args = parser.parse_args(argv)
    out = Path(args.out or REPO / "benchmarks" / "results" / f"iterations_{args.target}")
    out = out.with_suffix("") if out.suffix in (".md", ".json") else out
    bench = Bench(args)
    report = bench.run()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
    out.with_suffix(".md").write_text(to_markdown(report))
    log("summary: " + json.dumps(report["summary"]))
    log(f"wrote {out}.md and {out}.json")
    if not args.cache_dir:
        shutil.rmtree(bench.cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
