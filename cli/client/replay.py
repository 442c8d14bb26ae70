"""``kernelloop replay``: a job's best kernel re-judged here by the same harness, next to the stored figures.

The kernel is compiled for the local GPU (or CPU), checked on fresh random weights and inputs, and
timed against eager PyTorch and ``torch.compile``, both re-measured in this run: the baselines go
to a temporary directory unless ``--reuse-baselines`` lets the harness take them from its cache
(measured earlier on this machine with the same provenance). The table puts the stored and the
replayed figures side by side with their relative difference, and a warning says when the job
was measured on another device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from cli.client.export import export_standalone
from cli.client.http import ApiOpt, ApiRequestError, KeyOpt, api_failure, open_client
from cli.client.output import CliExit, err, out, status_text
from cli.common import machine_options, verdict_exit_code
from display import fmt_ms, fmt_pct, fmt_speedup
from problems import ProblemFormatError, parse_problem
from vocabulary.evaluation import Target
from vocabulary.verdict import Status, Verdict
from vocabulary.wire import JsonObject, Reader, WireError

if TYPE_CHECKING:  # the referee is imported when a replay runs, not by every command
    from harness import HarnessOptions


def local_arch_list() -> str | None:
    """``TORCH_CUDA_ARCH_LIST`` for this machine's first GPU (``9.0a`` on Hopper), from nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        result = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    caps = result.stdout.split()
    if result.returncode != 0 or not caps:
        return None
    # The arch-specific "a" targets (wgmma, setmaxnreg …) exist from Hopper on; the harness's own
    # default is 9.0a for the H200.
    return f"{caps[0]}a" if caps[0] in ("9.0", "10.0", "10.3", "12.0") else caps[0]


def _has_local_gpu() -> bool:
    return os.path.exists("/dev/nvidiactl")


@dataclass(frozen=True)
class _Figures:
    """One column of the replay table."""

    status: str
    compile: str
    correct: str
    candidate_ms: float | None
    eager_ms: float | None
    compile_ms: float | None
    vs_eager: float | None
    vs_compile: float | None
    pct_sol: float | None
    device: str

    @classmethod
    def of(cls, verdict: Verdict) -> _Figures:
        compile_text = "—"
        if verdict.compile is not None:
            cached = bool(verdict.compile.extensions) and all(e.cached for e in verdict.compile.extensions)
            compile_text = ("ok" if verdict.compile.ok else "failed") + f" {verdict.compile.seconds:.1f} s" + (
                " (cached)" if cached else ""
            )
        passed = sum(t.passed for t in verdict.trials)
        baselines = verdict.baselines
        return cls(
            status=verdict.status.value,
            compile=compile_text,
            correct=f"{passed}/{len(verdict.trials)} trials" if verdict.trials else "—",
            candidate_ms=verdict.timing.median_ms if verdict.timing else None,
            eager_ms=baselines.eager.median_ms if baselines and baselines.eager else None,
            compile_ms=baselines.torch_compile.median_ms if baselines and baselines.torch_compile else None,
            vs_eager=verdict.speedup_vs_eager,
            vs_compile=verdict.speedup_vs_compile,
            pct_sol=verdict.pct_of_sol,
            device=str(verdict.provenance.device or "?"),
        )


def replay_options(
    *, trials: int, cache_dir: Path | None, arch_list: str | None, reuse_baselines: bool
) -> HarnessOptions:
    """The harness options of a replay: eager and torch.compile re-measured unless ``reuse_baselines``,
    timed as this machine's service times its jobs."""
    # The machine's one cache, the service's too: a replay reuses the builds of the jobs run here.
    options = machine_options(cache_dir, trials=trials, reuse_baselines=reuse_baselines)
    if arch_list:
        options = options.replace(arch_list=arch_list)
    return options


def relative_difference(replayed: float | None, stored: float | None) -> str:
    """``(replayed - stored) / stored`` as a signed percentage; empty when either is missing."""
    if replayed is None or stored is None or stored == 0:
        return ""
    return f"{100 * (replayed - stored) / stored:+.1f}%"


def replay_table(
    stored: _Figures, local: _Figures, *, job_id: int, attempt_n: int, baselines_remeasured: bool = True
) -> Table:
    """Stored and replayed figures side by side, with the replayed one's relative difference."""
    caption = (
        "eager and torch.compile re-measured in this replay" if baselines_remeasured
        else "baselines from this machine's cache where it had them (--reuse-baselines)"
    )
    table = Table(title=f"replay of job {job_id}, attempt {attempt_n}", caption=caption)
    table.add_column("")
    table.add_column(f"stored ({stored.device})", justify="right")
    table.add_column(f"replayed ({local.device})", justify="right")
    table.add_column("difference", justify="right")
    table.add_row("status", status_text(stored.status), status_text(local.status), "")
    table.add_row("compile", stored.compile, local.compile, "")
    table.add_row("correctness", stored.correct, local.correct, "")
    for label, s, r, fmt in (
        ("candidate ms", stored.candidate_ms, local.candidate_ms, fmt_ms),
        ("eager ms", stored.eager_ms, local.eager_ms, fmt_ms),
        ("torch.compile ms", stored.compile_ms, local.compile_ms, fmt_ms),
        ("speedup vs eager", stored.vs_eager, local.vs_eager, fmt_speedup),
        ("speedup vs torch.compile", stored.vs_compile, local.vs_compile, fmt_speedup),
        ("% of SOL", stored.pct_sol, local.pct_sol, fmt_pct),
    ):
        table.add_row(label, fmt(s), fmt(r), relative_difference(r, s))
    return table


def replay(
    job: Annotated[int, typer.Argument(help="the job id", min=1)],
    api: ApiOpt = None,
    key: KeyOpt = None,
    target: Annotated[
        Target | None, typer.Option("--target", "-t", help="where to run it (default: the job's target)")
    ] = None,
    export: Annotated[
        Path | None, typer.Option("--export", help="also write a standalone .py (problem + kernel + a check)")
    ] = None,
    trials: Annotated[int, typer.Option(min=1, help="random-input correctness trials")] = 3,
    arch: Annotated[str | None, typer.Option(help="TORCH_CUDA_ARCH_LIST (default: the local GPU's)")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option("--cache-dir", help="builds, baselines and scratch (default: the machine's cache, "
                                  "shared with the service; see `kernelloop eval --help`)")
    ] = None,
    reuse_baselines: Annotated[bool, typer.Option(
        "--reuse-baselines", help="take eager and torch.compile timings from the cache when it has them "
        "(default: re-measure both)")] = False,
    details: Annotated[bool, typer.Option("--details", help="also print the whole local verdict")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the local Verdict JSON as the last line")] = False,
) -> None:
    """Re-run the job's best kernel through the same harness here: compile, check, time; compare."""
    with open_client(api, key) as client:
        try:
            job_row = Reader(client.get_job(job), f"job {job}")
            best_json = client.best_attempt(job)
            stored_problem = Reader(client.job_problem(job), f"job {job}'s problem")
        except ApiRequestError as exc:
            raise api_failure(exc) from None
    best = _BestAttempt.of(best_json, job)
    try:
        problem = parse_problem(
            stored_problem.text("source"), problem_id=stored_problem.optional_text("bundled_id") or f"job{job}-problem"
        )
    except ProblemFormatError as exc:
        err.print(f"[red]error:[/red] the job's problem does not parse here: {exc}")
        raise typer.Exit(CliExit.USAGE) from None
    job_target = Target(job_row.text("target"))
    run_target = target or job_target
    if run_target is Target.CUDA and not _has_local_gpu():
        err.print(
            f"[red]error:[/red] job {job} ran on cuda and this machine has no NVIDIA GPU; "
            "replay it on a GPU machine, or try --target cpu (a CUDA kernel will not build there)"
        )
        raise typer.Exit(CliExit.USAGE)
    stored = Verdict.from_dict(best.verdict)
    if export is not None:
        export_standalone(
            problem=problem, candidate_source=best.source, job_id=job, attempt_n=best.n, stored=best.verdict,
            path=export,
        )
        err.print(f"wrote {export} (run it with `python {export}`)")
    arch_list = arch or (local_arch_list() if run_target is Target.CUDA else None)
    with err.status(
        f"replaying job {job} attempt {best.n} on {problem.id} ({run_target.value}): compile, trials, timing "
        "of the kernel, eager and torch.compile…"
    ):
        from harness import evaluate

        options = replay_options(trials=trials, cache_dir=cache_dir, arch_list=arch_list,
                                 reuse_baselines=reuse_baselines)
        local = evaluate(problem, best.source, run_target, options)
    if details:
        from cli.common import render_verdict

        render_verdict(local, err if as_json else out)
    console = err if as_json else out
    console.print(replay_table(_Figures.of(stored), _Figures.of(local), job_id=job, attempt_n=best.n,
                               baselines_remeasured=not reuse_baselines))
    _replay_warnings(stored, local, job_target=job_target, run_target=run_target, console=console)
    if as_json:
        sys.stdout.write(json.dumps(local.to_dict()) + "\n")
    raise typer.Exit(verdict_exit_code(local))


@dataclass(frozen=True)
class _BestAttempt:
    """What replay needs of the job's best attempt as the API sends it."""

    n: int
    source: str
    #: The stored Verdict JSON.
    verdict: JsonObject

    @classmethod
    def of(cls, attempt: JsonObject, job_id: int) -> _BestAttempt:
        read = Reader(attempt, f"job {job_id}'s best attempt")
        verdict = attempt.get("verdict")
        if not isinstance(verdict, dict):
            raise WireError(f"job {job_id}'s best attempt has no verdict object")
        return cls(n=read.integer("n"), source=read.text("source"), verdict=verdict)


def _replay_warnings(
    stored: Verdict, local: Verdict, *, job_target: Target, run_target: Target, console: Console
) -> None:
    stored_device, local_device = stored.provenance.device, local.provenance.device
    if run_target is not job_target:
        console.print(f"[yellow]warning:[/yellow] the job ran on {job_target.value}, this replay on {run_target.value}")
    if stored_device != local_device:
        console.print(
            f"[yellow]warning:[/yellow] the job was measured on {stored_device!r}, this machine is {local_device!r}: "
            "timings and speedups are not comparable across devices",
            highlight=False,
        )
    stored_prov, local_prov = stored.provenance.to_dict(), local.provenance.to_dict()
    for name in ("torch", "cuda", "harness"):
        if stored_prov.get(name) != local_prov.get(name):
            console.print(
                f"[dim]note: {name} {stored_prov.get(name)} in the job, {local_prov.get(name)} here[/]",
                highlight=False,
            )
    if local.timing is not None:
        for warning in local.timing.warnings:
            console.print(f"[yellow]timing:[/] {warning}", highlight=False)
    if local.status is not Status.PASS and local.message:
        console.print(f"[red]{local.status.value}:[/red] {local.message}", highlight=False)

