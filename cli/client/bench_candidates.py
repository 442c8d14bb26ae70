"""``kernelloop bench SUITE --candidates DIR``: given candidates, judged locally, KernelBench's table.

No service and no agent: each problem of the suite is paired with ``DIR/<problem file name>`` (a
candidate written by hand, KernelBench-style) and evaluated by the harness in this process's
sandboxes, and every verified or ``suspicious`` verdict re-judged in a fresh process with
fresh seeds before it counts (`harness.retime`, as the worker does for a job's best). The figures
are KernelBench's: fast_p (the fraction of all problems
whose candidate is correct and more than p times faster than eager PyTorch; fast_0 is the fraction
correct) and geometric-mean speedups over eager and over torch.compile, with the device and the
versions they were measured with.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from cli.client.bench import BenchResult, BenchSummary, SuiteEntry, summarize
from cli.client.bench_timings import timings_markdown, verdicts_time_to_verdict
from harness.options import HarnessOptions
from harness.retime import evaluate_with_retime
from problems import Problem, load_problem, parse_problem
from vocabulary.evaluation import Target
from vocabulary.figures import AttemptFigures
from vocabulary.verdict import Status, Verdict
from vocabulary.wire import JsonObject, JsonValue

__all__ = ["CandidateRun", "environment", "kernelbench_table", "run_candidates"]


class CandidateRun:
    """One problem's candidate and verdict (``None`` when no candidate file was found); ``first``:
    the verdict before its re-judging, when there was one."""

    def __init__(self, entry: SuiteEntry, candidate: Path, verdict: Verdict | None, retimed: bool,
                 first: Verdict | None = None) -> None:
        self.entry = entry
        self.candidate = candidate
        self.verdict = verdict
        self.retimed = retimed
        self.first = first

    @property
    def evaluations(self) -> tuple[Verdict, ...]:
        """Every verdict the candidate took: its first, then its re-judging's."""
        return tuple(v for v in (self.first, self.verdict) if v is not None)

    @property
    def result(self) -> BenchResult:
        v = self.verdict
        passed = v is not None and v.status is Status.PASS
        return BenchResult(problem=self.entry.name, job_id=0, state="no candidate" if v is None else v.status.value,
                           best=AttemptFigures.of(v) if v is not None and passed else None, tokens=0, cost_usd=0.0)


def _problem(entry: SuiteEntry) -> Problem:
    if "problem_id" in entry.fields:
        return load_problem(entry.fields["problem_id"])
    return parse_problem(entry.fields["problem_source"], problem_id=entry.name)


def run_candidates(entries: Sequence[SuiteEntry], candidates_dir: Path, target: Target, options: HarnessOptions,
                   on_result: Callable[[CandidateRun], None] | None = None) -> list[CandidateRun]:
    """Evaluate ``candidates_dir/<name>.py`` against each entry, in order."""
    runs = []
    for entry in entries:
        candidate = candidates_dir / f"{entry.name.rsplit('/', 1)[-1]}.py"
        if not candidate.is_file():
            run = CandidateRun(entry, candidate, None, False)
        else:
            retimed: list[Verdict] = []
            verdict, first = evaluate_with_retime(_problem(entry), candidate.read_text(), target, options,
                                                  on_retime=retimed.append, always=True)
            run = CandidateRun(entry, candidate, verdict, bool(retimed), first)
        runs.append(run)
        if on_result is not None:
            on_result(run)
    return runs


def environment(runs: Sequence[CandidateRun], target: Target) -> JsonObject:
    """Where the figures were measured: device and versions (from the verdicts' provenance) and the host."""
    prov = next((r.verdict.provenance.to_dict() for r in runs if r.verdict is not None and r.verdict.provenance.device),
                {})
    try:
        load = tuple(round(v, 2) for v in os.getloadavg())
    except OSError:
        load = None
    return {
        "target": target.value, "device": prov.get("device"), "torch": prov.get("torch"),
        "cuda": prov.get("cuda"), "python": prov.get("python") or platform.python_version(),
        "harness": prov.get("harness"), "host": platform.node(), "machine": platform.machine(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "load_avg_at_end": load,
    }


def kernelbench_table(results: Sequence[BenchResult], summary: BenchSummary, env: Mapping[str, JsonValue], *,
                      title: str, notes: Sequence[str] = ()) -> str:
    """KernelBench's figures as Markdown: fast_p and geomean speedups, then one row per problem."""

    def x(v: float | None) -> str:
        return "—" if v is None else f"{v:.2f}×"

    lines = [
        f"# {title}", "",
        f"Device: {env.get('device')} ({env.get('target')} target) · torch {env.get('torch')} · "
        f"Python {env.get('python')} · harness {env.get('harness')} · host {env.get('host')} "
        f"({env.get('machine')}, {env.get('usable_cores')} usable cores, OMP_NUM_THREADS={env.get('omp_num_threads')}"
        f", load average at the end {env.get('load_avg_at_end')})", "",
        "| " + " | ".join(f"fast_{p:g}" for p in summary.fast_p) + " | geomean vs eager | geomean vs torch.compile "
        "| problems |",
        "|" + "---:|" * (len(summary.fast_p) + 3),
        "| " + " | ".join(f"{v:.2f}" for v in summary.fast_p.values())
        + f" | {x(summary.geomean_speedup_vs_eager)} | {x(summary.geomean_speedup_vs_compile)} | {summary.problems} |",
        "",
        "| problem | verdict | correct | median ms | vs eager | vs torch.compile |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in results:
        best = r.figures
        median = "—" if best.median_ms is None else f"{best.median_ms:.4f}"
        lines.append(f"| {r.problem} | {r.state} | {'yes' if r.correct else 'no'} | {median} | "
                     f"{x(best.speedup_vs_eager)} | {x(best.speedup_vs_compile)} |")
    lines += ["", "fast_p: the fraction of all problems whose candidate is correct and more than p times faster "
              "than eager PyTorch (fast_0: correct). Geometric means over the correct problems.", *notes, ""]
    return "\n".join(lines)


def write_report(runs: Sequence[CandidateRun], target: Target, out_dir: Path, *, suite: Path,
                 candidates_dir: Path) -> tuple[BenchSummary, str]:
    """bench.md (the table) and bench.json (figures, environment, each verdict's summary) in ``out_dir``."""
    results = [r.result for r in runs]
    summary = summarize(results)
    env = environment(runs, target)
    notes = []
    for r in runs:
        v = r.verdict
        if v is not None and v.status is not Status.PASS:
            notes.append(f"- {r.entry.name}: {v.status.value} at {v.stage.value}: {v.message[:300]}")
        if r.retimed and v is not None and v.status is not Status.PASS:
            notes.append(f"- {r.entry.name}: re-judged in a fresh process with fresh seeds, and did not pass again")
        if v is not None and v.timing is not None and v.timing.warnings:
            notes.append(f"- {r.entry.name}: timing: {'; '.join(v.timing.warnings)}")
    markdown = kernelbench_table(results, summary, env, title=f"kernelloop bench: {suite.name} with "
                                 f"{candidates_dir.name}/ ({target.value})", notes=["", *notes] if notes else ())
    timings = verdicts_time_to_verdict(v for r in runs for v in r.evaluations)
    markdown += "\n" + timings_markdown(timings)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.md").write_text(markdown)
    (out_dir / "bench.json").write_text(json.dumps({
        "suite": str(suite), "candidates": str(candidates_dir), "created_at": datetime.now(UTC).isoformat(),
        "environment": env, "summary": summary.to_dict(), "problems": [r.to_dict() for r in results],
        "verdicts": [None if r.verdict is None else {
            "status": r.verdict.status.value, "stage": r.verdict.stage.value, "message": r.verdict.message,
            "speedup_vs_eager": r.verdict.speedup_vs_eager, "speedup_vs_compile": r.verdict.speedup_vs_compile,
            "timing": r.verdict.timing.to_dict() if r.verdict.timing else None,
            "baselines": r.verdict.baselines.to_dict() if r.verdict.baselines else None,
            "retimed": r.retimed} for r in runs],
        "time_to_verdict": timings.to_dict(),
    }, indent=1) + "\n")
    return summary, markdown
