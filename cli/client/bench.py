"""``kernelloop bench``: one job per problem of a suite, then KernelBench's figures (fast_p, geomean speedups)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cli.client.http import ApiClient, ApiError, ApiOpt, KeyOpt, api_failure, open_client
from cli.client.output import ExitCode, err, finite, fmt_usd, fmt_x, out
from harness import Target
from problems import ProblemFormatError, bundled_ids, read_problem_file

#: fast_p thresholds (KernelBench): correct and more than p times faster than eager PyTorch.
BENCH_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)
#: ``bench`` polls its jobs this often by default.
BENCH_POLL_S = 2.0
_TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})


@dataclass(frozen=True)
class SuiteEntry:
    """One problem of a suite: its display name and the job body fields naming it."""

    name: str
    fields: Mapping[str, str]


def read_suite(suite: Path) -> list[SuiteEntry]:
    """The problems of a suite: a directory of problem files, or a text file of ids and paths
    (one per line; ``#`` starts a comment; relative paths are relative to the file).

    Raises:
        ValueError: an entry names neither a bundled problem nor a file, or the suite is empty.
    """
    known = set(bundled_ids())
    entries: list[SuiteEntry] = []
    if suite.is_dir():
        for path in sorted(suite.glob("*.py")):
            if not path.name.startswith("_"):
                entries.append(SuiteEntry(path.stem, {"problem_source": read_problem_file(path).source}))
    else:
        for number, raw in enumerate(suite.read_text().splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line in known:
                entries.append(SuiteEntry(line, {"problem_id": line}))
                continue
            path = Path(line) if Path(line).is_absolute() else suite.parent / line
            if not path.is_file():
                raise ValueError(f"{suite}:{number}: {line!r} is neither a bundled problem id nor a file")
            entries.append(SuiteEntry(path.stem, {"problem_source": read_problem_file(path).source}))
    if not entries:
        raise ValueError(f"{suite} names no problems")
    return entries


@dataclass(frozen=True)
class BenchResult:
    """One problem's outcome in a bench run."""

    problem: str
    job_id: int
    state: str
    correct: bool
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    median_ms: float | None
    tokens: int
    cost_usd: float

    @classmethod
    def from_job(cls, problem: str, job: Mapping[str, Any]) -> BenchResult:
        best = job.get("best") or {}
        return cls(
            problem=problem,
            job_id=int(job["id"]),
            state=str(job["state"]),
            # A job's best attempt is always a verified ("pass") one.
            correct=bool(best),
            speedup_vs_eager=finite(best.get("speedup_vs_eager")),
            speedup_vs_compile=finite(best.get("speedup_vs_compile")),
            median_ms=finite(best.get("median_ms")),
            tokens=int(job.get("tokens_in") or 0) + int(job.get("tokens_out") or 0),
            cost_usd=float(job.get("cost_usd") or 0.0),
        )


def _geomean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v > 0]
    return statistics.geometric_mean(positive) if positive else None


@dataclass(frozen=True)
class BenchSummary:
    """KernelBench's figures over a suite: fast_p and geometric-mean speedups."""

    problems: int
    #: fast_p for each p of `BENCH_THRESHOLDS`: the fraction of ALL problems whose best kernel is
    #: correct and more than p times faster than eager (fast_0: the fraction correct).
    fast_p: Mapping[float, float]
    #: Over the correct problems that were timed.
    geomean_speedup_vs_eager: float | None
    geomean_speedup_vs_compile: float | None
    tokens: int
    cost_usd: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "problems": self.problems,
            "fast_p": {f"{p:g}": v for p, v in self.fast_p.items()},
            "geomean_speedup_vs_eager": self.geomean_speedup_vs_eager,
            "geomean_speedup_vs_compile": self.geomean_speedup_vs_compile,
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
        }


def summarize(results: Sequence[BenchResult], thresholds: Sequence[float] = BENCH_THRESHOLDS) -> BenchSummary:
    """fast_p, geometric means, totals.

    Raises:
        ValueError: no results.
    """
    if not results:
        raise ValueError("no results to summarize")

    def fast(r: BenchResult, p: float) -> bool:
        if p == 0:
            return r.correct
        return r.correct and r.speedup_vs_eager is not None and r.speedup_vs_eager > p

    correct = [r for r in results if r.correct]
    return BenchSummary(
        problems=len(results),
        fast_p={p: sum(fast(r, p) for r in results) / len(results) for p in thresholds},
        geomean_speedup_vs_eager=_geomean([r.speedup_vs_eager for r in correct if r.speedup_vs_eager is not None]),
        geomean_speedup_vs_compile=_geomean(
            [r.speedup_vs_compile for r in correct if r.speedup_vs_compile is not None]
        ),
        tokens=sum(r.tokens for r in results),
        cost_usd=sum(r.cost_usd for r in results),
    )


def bench_markdown(results: Sequence[BenchResult], summary: BenchSummary, *, title: str) -> str:
    def num(v: float | None, suffix: str = "×") -> str:
        return "—" if v is None else f"{v:.2f}{suffix}"

    lines = [
        f"# {title}",
        "",
        "| " + " | ".join(f"fast_{p:g}" for p in summary.fast_p) + " | geomean vs eager | geomean vs torch.compile "
        "| problems | tokens | cost |",
        "|" + "---:|" * (len(summary.fast_p) + 5),
        "| " + " | ".join(f"{v:.2f}" for v in summary.fast_p.values())
        + f" | {num(summary.geomean_speedup_vs_eager)} | {num(summary.geomean_speedup_vs_compile)} "
        f"| {summary.problems} | {summary.tokens:,} | ${summary.cost_usd:.2f} |",
        "",
        "| problem | job | state | correct | median ms | vs eager | vs torch.compile | tokens | cost |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.problem} | {r.job_id} | {r.state} | {'yes' if r.correct else 'no'} | "
            f"{num(r.median_ms, '')} | {num(r.speedup_vs_eager)} | {num(r.speedup_vs_compile)} | {r.tokens:,} | "
            f"${r.cost_usd:.2f} |"
        )
    lines += [
        "",
        "fast_p: the fraction of all problems whose best kernel is correct and more than p times faster than eager "
        "PyTorch (fast_0: correct). Geometric means over the correct problems.",
        "",
    ]
    return "\n".join(lines)


def _wait_for_jobs(
    client: ApiClient, job_ids: Sequence[int], *, poll_s: float, timeout_s: float | None,
    on_update: Callable[[dict[int, dict[str, Any]]], None],
) -> tuple[dict[int, dict[str, Any]], bool]:
    """Poll until every job ended (or the timeout); returns the jobs and whether all ended."""
    jobs: dict[int, dict[str, Any]] = {}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        for job_id in job_ids:
            if jobs.get(job_id, {}).get("state") not in _TERMINAL_STATES:
                jobs[job_id] = client.get_job(job_id)
        on_update(jobs)
        if all(j["state"] in _TERMINAL_STATES for j in jobs.values()):
            return jobs, True
        if deadline is not None and time.monotonic() >= deadline:
            return jobs, False
        time.sleep(poll_s)


def _bench_candidates(entries: Sequence[SuiteEntry], suite: Path, candidates: Path, target: Target | None,
                      out_dir: Path, cache_dir: Path | None) -> None:
    """``bench --candidates``: judge given candidates locally (`cli.client.bench_candidates`)."""
    from cli.client.bench_candidates import CandidateRun, run_candidates, write_report
    from harness.options import HarnessOptions

    target = target or Target.CPU
    options = HarnessOptions() if cache_dir is None else HarnessOptions(cache_dir=cache_dir)

    def show(run: CandidateRun) -> None:
        r = run.result
        err.print(f"{r.problem}: {r.state}, {fmt_x(r.speedup_vs_eager)} vs eager, {fmt_x(r.speedup_vs_compile)} "
                  "vs torch.compile" + (" (re-timed)" if run.retimed else ""), highlight=False)

    runs = run_candidates(entries, candidates, target, options, on_result=show)
    _, markdown = write_report(runs, target, out_dir, suite=suite, candidates_dir=candidates)
    out.print(markdown, markup=False, highlight=False)
    err.print(f"wrote {out_dir / 'bench.md'} and {out_dir / 'bench.json'}")


def bench(
    suite: Annotated[Path, typer.Argument(help="a file of problem ids or paths (one a line), or a directory")],
    api: ApiOpt = None,
    key: KeyOpt = None,
    target: Annotated[Target | None, typer.Option(
        "--target", "-t", help="cuda or cpu (default: the service's; `kernelloop up` uses its workers')")] = None,
    llm: Annotated[str | None, typer.Option("--llm", help="a server-side LLM profile")] = None,
    trajectories: Annotated[int | None, typer.Option(min=1, help="chats per problem")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="where bench.md and bench.json go")] = Path("."),
    poll: Annotated[float, typer.Option(min=0.05, help="seconds between polls of the jobs")] = BENCH_POLL_S,
    timeout: Annotated[float | None, typer.Option(min=1, help="give up waiting after this many seconds")] = None,
    candidates: Annotated[Path | None, typer.Option(
        "--candidates", help="judge these candidates (DIR/<problem file name>) locally instead of running jobs",
        file_okay=False)] = None,
    cache_dir: Annotated[Path | None, typer.Option(
        "--cache-dir", help="with --candidates: builds, baselines and scratch (default ~/.cache/kernelloop)")] = None,
) -> None:
    """One job per problem of a suite, then a KernelBench-style table (fast_p, geomean speedups) as Markdown + JSON.

    With --candidates DIR, no jobs: each problem's candidate DIR/<name>.py is judged locally."""
    try:
        entries = read_suite(suite)
    except (OSError, ValueError, ProblemFormatError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(ExitCode.USAGE) from None
    if candidates is not None:
        _bench_candidates(entries, suite, candidates, target, out_dir, cache_dir)
        return
    extra: dict[str, Any] = {}
    if target is not None:
        extra["target"] = target.value
    if llm is not None:
        extra["llm_profile"] = llm
    if trajectories is not None:
        extra["trajectories"] = trajectories
    with open_client(api, key) as client:
        try:
            submitted: list[tuple[SuiteEntry, int]] = []
            for entry in entries:
                job = client.submit_job({**entry.fields, **extra})
                submitted.append((entry, int(job["id"])))
                err.print(f"job {job['id']} {job['state']}: {entry.name}", highlight=False)
            with err.status("waiting for the jobs…") as status:

                def show(jobs: dict[int, dict[str, Any]]) -> None:
                    done = sum(j["state"] in _TERMINAL_STATES for j in jobs.values())
                    status.update(f"{done}/{len(jobs)} jobs finished…")

                jobs, finished = _wait_for_jobs(
                    client, [j for _, j in submitted], poll_s=poll, timeout_s=timeout, on_update=show
                )
        except ApiError as exc:
            raise api_failure(exc) from None
    results = [BenchResult.from_job(entry.name, jobs[job_id]) for entry, job_id in submitted]
    summary = summarize(results)
    title = f"kernelloop bench: {suite.name} ({extra.get('target', 'server default target')})"
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = bench_markdown(results, summary, title=title)
    (out_dir / "bench.md").write_text(markdown)
    report = {
        "suite": str(suite),
        "api_url": client.config.api_url,
        "target": extra.get("target"),
        "llm_profile": extra.get("llm_profile"),
        "finished": finished,
        "created_at": datetime.now(UTC).isoformat(),
        "summary": summary.to_dict(),
        "problems": [asdict(r) for r in results],
    }
    (out_dir / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    table = Table(title=title)
    for col in ("problem", "job", "state", "correct", "vs eager", "vs compile", "tokens", "cost"):
        table.add_column(col)
    for r in results:
        table.add_row(
            r.problem, str(r.job_id), r.state, "yes" if r.correct else "no", fmt_x(r.speedup_vs_eager),
            fmt_x(r.speedup_vs_compile), f"{r.tokens:,}", fmt_usd(r.cost_usd),
        )
    out.print(table)
    out.print(
        "  ".join(f"fast_{p:g} = {v:.2f}" for p, v in summary.fast_p.items())
        + f"  geomean {fmt_x(summary.geomean_speedup_vs_eager)} vs eager, "
        f"{fmt_x(summary.geomean_speedup_vs_compile)} vs torch.compile",
        highlight=False,
    )
    err.print(f"wrote {out_dir / 'bench.md'} and {out_dir / 'bench.json'}")
    if not finished:
        err.print("[yellow]warning:[/yellow] timed out before every job ended; unfinished jobs count as not correct")
        raise typer.Exit(ExitCode.FAILED)

