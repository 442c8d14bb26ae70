"""``kernelloop bench``: one job per problem of a suite, then KernelBench's figures (fast_p, geomean speedups)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from cli.client.bench_timings import jobs_time_to_verdict, timings_markdown
from cli.client.benchrun import (
    NOT_SUBMITTED,
    BenchInterrupted,
    BenchState,
    ProblemRun,
    Submission,
    interrupt_on_sigterm,
    run_suite,
)
from cli.client.http import ApiOpt, ApiRequestError, KeyOpt, api_failure, open_client
from cli.client.output import CliExit, JsonOpt, err, json_count, json_object, out, print_json
from cli.common import machine_options
from display import finite, fmt_speedup, fmt_usd
from problems import ProblemFormatError, bundled_ids, read_problem_file
from vocabulary.evaluation import Target
from vocabulary.figures import AttemptFigures
from vocabulary.verdict import Stage, Status
from vocabulary.wire import JsonObject, JsonValue, Reader

#: fast_p thresholds (KernelBench): correct and more than p times faster than eager PyTorch.
BENCH_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)
#: ``bench`` polls its jobs this often by default.
BENCH_POLL_S = 2.0


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


#: What a problem without a best kernel shows: no figures.
_NO_FIGURES = AttemptFigures(status=Status.FAIL, stage=Stage.PROBLEM)


@dataclass(frozen=True)
class BenchResult:
    """One problem's outcome in a bench run."""

    problem: str
    #: ``None``: never submitted (quota, interruption) or refused.
    job_id: int | None
    state: str
    #: The figures of the problem's best kernel; ``None`` where it has none.
    best: AttemptFigures | None
    tokens: int
    cost_usd: float

    @property
    def correct(self) -> bool:
        return self.best is not None and self.best.correct

    @property
    def figures(self) -> AttemptFigures:
        """The best kernel's figures, or none to show (every figure ``None``)."""
        return self.best or _NO_FIGURES

    def to_dict(self) -> JsonObject:
        """The report's row: flat, the best kernel's figures beside the problem's."""
        best = self.figures
        return {"problem": self.problem, "job_id": self.job_id, "state": self.state, "correct": self.correct,
                "speedup_vs_eager": best.speedup_vs_eager, "speedup_vs_compile": best.speedup_vs_compile,
                "median_ms": best.median_ms, "tokens": self.tokens, "cost_usd": self.cost_usd}

    @classmethod
    def from_job(cls, problem: str, job: Mapping[str, JsonValue]) -> BenchResult:
        best = json_object(job.get("best"))
        read = Reader(job, f"the job of {problem}")
        return cls(
            problem=problem,
            job_id=read.integer("id"),
            state=read.text("state"),
            # A job's best attempt is always a verified one: a timed pass (what an older API leaves out).
            best=AttemptFigures.from_dict({"status": "pass", "stage": "done", "correct": True, **best})
            if best else None,
            tokens=json_count(job.get("tokens_in")) + json_count(job.get("tokens_out")),
            cost_usd=finite(job.get("cost_usd")) or 0.0,
        )

    @classmethod
    def from_run(cls, run: ProblemRun) -> BenchResult:
        """A problem of a bench as it stands; one without a job counts as not correct."""
        if run.job is None:
            return cls(problem=run.name, job_id=None, state=run.state, best=None, tokens=0, cost_usd=0.0)
        return cls.from_job(run.name, run.job)


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

    def to_dict(self) -> JsonObject:
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

    correct = [r.best for r in results if r.best is not None and r.best.correct]

    def fast(r: BenchResult, p: float) -> bool:
        best = r.best
        return best is not None and best.correct and (p == 0 or (best.speedup_vs_eager or 0.0) > p)

    return BenchSummary(
        problems=len(results),
        fast_p={p: sum(fast(r, p) for r in results) / len(results) for p in thresholds},
        geomean_speedup_vs_eager=_geomean([b.speedup_vs_eager for b in correct if b.speedup_vs_eager is not None]),
        geomean_speedup_vs_compile=_geomean(
            [b.speedup_vs_compile for b in correct if b.speedup_vs_compile is not None]
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
        best = r.figures
        lines.append(
            f"| {r.problem} | {r.job_id or '—'} | {r.state} | {'yes' if r.correct else 'no'} | "
            f"{num(best.median_ms, '')} | {num(best.speedup_vs_eager)} | {num(best.speedup_vs_compile)} | "
            f"{r.tokens:,} | ${r.cost_usd:.2f} |"
        )
    lines += [
        "",
        "fast_p: the fraction of all problems whose best kernel is correct and more than p times faster than eager "
        "PyTorch (fast_0: correct). Geometric means over the correct problems.",
        "",
    ]
    return "\n".join(lines)


def _resume_path(resume: Path) -> Path:
    return resume / "bench.json" if resume.is_dir() else resume


def _bench_candidates(entries: Sequence[SuiteEntry], suite: Path, candidates: Path, target: Target | None,
                      out_dir: Path, cache_dir: Path | None) -> None:
    """``bench --candidates``: judge given candidates locally (`cli.client.bench_candidates`)."""
    from cli.client.bench_candidates import CandidateRun, run_candidates, write_report

    target = target or Target.CPU
    options = machine_options(cache_dir)

    def show(run: CandidateRun) -> None:
        r = run.result
        best = r.figures
        err.print(f"{r.problem}: {r.state}, {fmt_speedup(best.speedup_vs_eager)} vs eager, "
                  f"{fmt_speedup(best.speedup_vs_compile)} vs torch.compile" + (" (re-timed)" if run.retimed else ""),
                  highlight=False)

    runs = run_candidates(entries, candidates, target, options, on_result=show)
    _, markdown = write_report(runs, target, out_dir, suite=suite, candidates_dir=candidates)
    out.print(markdown, markup=False, highlight=False)
    err.print(f"wrote {out_dir / 'bench.md'} and {out_dir / 'bench.json'}")


def bench(
    suite: Annotated[Path | None, typer.Argument(
        help="a file of problem ids or paths (one a line), or a directory (with --resume: the report's suite)")] = None,
    api: ApiOpt = None,
    key: KeyOpt = None,
    target: Annotated[Target | None, typer.Option(
        "--target", "-t", help="cuda or cpu (default: the service's; `kernelloop up` uses its workers')")] = None,
    llm: Annotated[str | None, typer.Option("--llm", help="a server-side LLM profile")] = None,
    trajectories: Annotated[int | None, typer.Option(min=1, help="chats per problem")] = None,
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="where bench.md and bench.json go (default: the current directory, or the resumed report's)")]
    = None,
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="an earlier bench.json (or its directory): re-attach its running jobs, submit the rest")]
    = None,
    poll: Annotated[float, typer.Option(min=0.05, help="seconds between polls of the jobs")] = BENCH_POLL_S,
    timeout: Annotated[float | None, typer.Option(min=1, help="give up waiting after this many seconds")] = None,
    as_json: JsonOpt = False,
    candidates: Annotated[Path | None, typer.Option(
        "--candidates", help="judge these candidates (DIR/<problem file name>) locally instead of running jobs",
        file_okay=False)] = None,
    cache_dir: Annotated[Path | None, typer.Option(
        "--cache-dir", help="with --candidates: builds, baselines and scratch (default ~/.cache/kernelloop)")] = None,
) -> None:
    """One job per problem of a suite, within the key's quota, then a KernelBench-style table (fast_p, geomean
    speedups) as Markdown + JSON; Ctrl-C writes a partial report that --resume continues.

    With --candidates DIR, no jobs: each problem's candidate DIR/<name>.py is judged locally."""
    from cli.versions import local_versions

    previous: BenchState | None = None
    if resume is not None:
        try:
            previous = BenchState.load(_resume_path(resume))
            saved = Reader(previous.header, f"the header of {previous.path}")
            saved_target, saved_llm = saved.optional_text("target"), saved.optional_text("llm_profile")
            saved_trajectories = saved.optional_integer("trajectories")
        except ValueError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(CliExit.USAGE) from None
        suite = suite or Path(str(previous.header.get("suite")))
        target = target or (Target(saved_target) if saved_target else None)
        llm = llm or saved_llm
        trajectories = trajectories or saved_trajectories
    if suite is None:
        err.print("[red]error:[/red] name a suite (a file of problem ids, or a directory), or --resume a report")
        raise typer.Exit(CliExit.USAGE)
    try:
        entries = read_suite(suite)
    except (OSError, ValueError, ProblemFormatError) as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(CliExit.USAGE) from None
    if candidates is not None:
        _bench_candidates(entries, suite, candidates, target, out_dir or Path("."), cache_dir)
        return
    extra: JsonObject = {}
    if target is not None:
        extra["target"] = target.value
    if llm is not None:
        extra["llm_profile"] = llm
    if trajectories is not None:
        extra["trajectories"] = trajectories
    out_dir = out_dir or (_resume_path(resume).parent if resume is not None else Path("."))
    interrupted = False
    with open_client(api, key) as client:
        header: JsonObject = {"suite": str(suite.resolve()), "api_url": client.config.api_url,
                              "target": extra.get("target"), "llm_profile": extra.get("llm_profile"),
                              "trajectories": extra.get("trajectories"), "client": local_versions()}
        state = BenchState(path=out_dir / "bench.json", header=header, runs=[ProblemRun(e.name) for e in entries])
        if previous is not None:
            state.runs = [previous.run(e.name) or ProblemRun(e.name) for e in entries]
            state.created_at = previous.created_at or state.created_at
            resumed = [r for r in state.runs if r.job_id is not None]
            err.print(f"resuming {previous.path}: {sum(r.ended for r in resumed)} problems done, "
                      f"{sum(not r.ended for r in resumed)} jobs to re-attach, "
                      f"{sum(r.job_id is None and r.refused is None for r in state.runs)} to submit")
        submissions = [Submission(e.name, {**e.fields, **extra}) for e in entries]
        try:
            with interrupt_on_sigterm(), err.status("running the suite…") as status:

                def show(line: str) -> None:
                    done = sum(r.ended for r in state.runs)
                    err.print(escape(line), highlight=False)
                    status.update(f"{done}/{len(state.runs)} problems finished…")

                finished = run_suite(client, state, submissions, poll_s=poll, timeout_s=timeout, on_change=show)
        except (KeyboardInterrupt, BenchInterrupted):
            finished, interrupted = False, True
        except ApiRequestError as exc:
            state.save()
            err.print(f"the report so far is in {state.path}; `kernelloop bench --resume {state.path}` continues",
                      highlight=False, soft_wrap=True)
            raise api_failure(exc) from None
        timings, timing_notes = jobs_time_to_verdict(client, [r.job_id for r in state.runs if r.job_id is not None])
    results = [BenchResult.from_run(r) for r in state.runs]
    summary = summarize(results)
    state.save(summary=summary.to_dict(), results=[r.to_dict() for r in results], interrupted=interrupted,
               time_to_verdict=timings.to_dict() if timings is not None else None)
    report = json.loads(state.path.read_text())
    where = report["provenance"].get("device") or report["provenance"].get("target") or "no verdict yet"
    title = f"kernelloop bench: {suite.name} ({report['provenance'].get('target') or 'no job ran'}, {where})"
    markdown = bench_markdown(results, summary, title=title)
    (out_dir / "bench.md").write_text(markdown + timings_markdown(timings, timing_notes) + "\n"
                                      + provenance_markdown(report["provenance"]))
    if as_json:
        print_json(report)
    else:
        table = Table(title=title)
        for col in ("problem", "job", "state", "correct", "vs eager", "vs compile", "tokens", "cost"):
            table.add_column(col)
        for r in results:
            best = r.figures
            table.add_row(
                r.problem, str(r.job_id or "—"), r.state, "yes" if r.correct else "no",
                fmt_speedup(best.speedup_vs_eager), fmt_speedup(best.speedup_vs_compile), f"{r.tokens:,}",
                fmt_usd(r.cost_usd),
            )
        out.print(table)
        out.print(
            "  ".join(f"fast_{p:g} = {v:.2f}" for p, v in summary.fast_p.items())
            + f"  geomean {fmt_speedup(summary.geomean_speedup_vs_eager)} vs eager, "
            f"{fmt_speedup(summary.geomean_speedup_vs_compile)} vs torch.compile",
            highlight=False,
        )
        if timings is not None and timings.verdicts_per_lane_hour is not None:
            out.print(f"{timings.verdicts_per_lane_hour:,.0f} verdicts per lane-hour ({timings.attempts} attempts, "
                      f"{timings.lane_s:.1f} s of lane time); time to verdict per stage in {out_dir / 'bench.md'}",
                      highlight=False)
    err.print(f"wrote {out_dir / 'bench.md'} and {state.path}")
    if not finished:
        running = [r for r in state.runs if r.job_id is not None and not r.ended]
        unsent = [r for r in state.runs if r.state == NOT_SUBMITTED]
        why = "interrupted" if interrupted else "stopped before every problem ended"
        err.print(f"[yellow]{why}:[/yellow] {len(running)} jobs still running (they go on; `kernelloop cancel ID` "
                  f"stops one), {len(unsent)} problems not submitted; unfinished ones count as not correct. "
                  "Continue with:", highlight=False)
        err.print(f"  kernelloop bench --resume {state.path}", highlight=False, soft_wrap=True)
        raise typer.Exit(CliExit.INTERRUPTED if interrupted else CliExit.FAILED)


def provenance_markdown(provenance: Mapping[str, JsonValue]) -> str:
    """Where the figures come from, under the tables."""
    client = json_object(provenance.get("client"))

    def value(v: JsonValue) -> str:
        return "—" if v is None else ", ".join(map(str, v)) if isinstance(v, list) else str(v)

    rows = [("target", provenance.get("target")), ("device", provenance.get("device")),
            ("driver", provenance.get("driver")), ("torch (service)", provenance.get("torch")),
            ("CUDA (service)", provenance.get("cuda")), ("cuDNN", provenance.get("cudnn")),
            ("harness", provenance.get("harness")), ("kernelloop (client)", client.get("kernelloop")),
            ("torch (client)", client.get("torch"))]
    return "\n".join(["## Provenance", "", "| | |", "|---|---|", *(f"| {k} | {value(v)} |" for k, v in rows), ""])
