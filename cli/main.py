"""The ``kernelloop`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cli.client.columns import Column, show_rows
from cli.client.output import err, out
from cli.common import HELP_STYLE, default_target, fmt_number, machine_options, render_verdict, verdict_exit_code
from vocabulary.evaluation import Target

if TYPE_CHECKING:  # imported by the commands that judge: a client command (`jobs`, `watch`) loads neither
    from problems import Problem
    from vocabulary.verdict import Verdict

app = typer.Typer(help="kernelloop: an LLM writes CUDA kernels; a sandboxed referee judges them.",
                  no_args_is_help=True, **HELP_STYLE)


def _print_version(value: bool) -> None:
    if value:
        from cli.versions import local_versions, version_line

        sys.stdout.write(version_line(local_versions()) + "\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="print the versions of kernelloop, torch and CUDA, and exit")] = False,
) -> None:
    """kernelloop: an LLM writes CUDA kernels; a sandboxed referee judges them."""
problems_app = typer.Typer(help="List and check reference problems.", no_args_is_help=True, **HELP_STYLE)
app.add_typer(problems_app, name="problems")

#: Misuse (unknown problem, unreadable file) exits with the same code as an error that is not the
#: candidate's (`cli.common.verdict_exit_code`).
EXIT_USAGE = 2



def _load_problem_or_exit(ref: str) -> Problem:
    from problems import ProblemFormatError, UnknownProblemError, load_problem

    try:
        return load_problem(ref)
    except UnknownProblemError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_USAGE) from None
    except ProblemFormatError as exc:
        err.print(f"[red]error:[/red] {escape(ref)}: {escape(str(exc))}")
        raise typer.Exit(EXIT_USAGE) from None


TargetOpt = Annotated[
    Target | None, typer.Option("--target", "-t", help="cuda or cpu (default: cuda if a GPU is present)")
]
#: Help of every ``--cache-dir``: the machine's one cache, which the service's workers use too.
CACHE_DIR_HELP = ("builds, baselines and scratch (default: the machine's cache, shared with the service: "
                  "$KERNELLOOP_CACHE_DIR, else $XDG_CACHE_HOME/kernelloop, else ~/.cache/kernelloop)")
CacheOpt = Annotated[Path | None, typer.Option("--cache-dir", help=CACHE_DIR_HELP)]


@app.command("eval")
def eval_command(
    problem: Annotated[str, typer.Argument(help="a bundled problem id or a problem file")],
    candidate: Annotated[Path, typer.Argument(help="the candidate file (defines ModelNew)")],
    target: TargetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the Verdict JSON as the last line")] = False,
    trials: Annotated[int, typer.Option(help="random-input correctness trials")] = 3,
    compile_baseline: Annotated[bool, typer.Option(help="also time torch.compile of the reference")] = True,
    seed: Annotated[int | None, typer.Option(help="fix the secret seed (reproducible runs)")] = None,
    cache_dir: CacheOpt = None,
) -> None:
    """Compile, check and time one candidate against a problem; exit 0 pass, 1 the candidate failed
    (wrong, suspicious, does not compile, crashes), 2 an error not the candidate's or misuse.

    A ``suspicious`` verdict is re-timed (a fresh process, fresh seeds) before the answer, as the
    worker does (`harness.retime`)."""
    spec = _load_problem_or_exit(problem)
    if not candidate.is_file():
        err.print(f"[red]error:[/red] candidate file {candidate} not found")
        raise typer.Exit(EXIT_USAGE)
    target = target or default_target()
    options = machine_options(cache_dir, trials=trials, compile_baseline=compile_baseline, secret_seed=seed)
    def retiming(first: Verdict) -> None:
        err.print(f"[yellow]suspicious:[/] {first.message}; re-timing in a fresh process with fresh seeds")

    from harness.retime import evaluate_with_retime

    with err.status(f"evaluating {candidate.name} on {spec.id} ({target.value}): compile, trials, timing…"):
        verdict, _ = evaluate_with_retime(spec, candidate.read_text(), target, options, on_retime=retiming)
    if as_json:
        render_verdict(verdict, err)
        sys.stdout.write(json.dumps(verdict.to_dict()) + "\n")
    else:
        render_verdict(verdict, out)
    raise typer.Exit(verdict_exit_code(verdict))


@problems_app.command("list")
def problems_list(
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
) -> None:
    """List the bundled problems."""
    from problems import bundled_problems

    found = bundled_problems()
    if as_json:
        sys.stdout.write(json.dumps([{k: v for k, v in p.to_dict().items() if k != "source"} for p in found]) + "\n")
        return
    columns = [Column("id", key=True), Column("level", "right", key=True), Column("mode", key=True),
               Column("policy", key=True), Column("description")]
    show_rows(out, columns, [[p.id, str(p.level), p.mode.value, p.policy.value, p.description] for p in found],
              title=f"{len(found)} bundled problems")


@problems_app.command("check")
def problems_check(
    refs: Annotated[
        list[str] | None, typer.Argument(help="problem ids or files (default: every bundled problem)")
    ] = None,
    target: TargetOpt = None,
    cache_dir: CacheOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines instead of a table")] = False,
) -> None:
    """Admission checks: output depends on inputs and weights, is deterministic, and zeros fail."""
    from harness.admission import admit
    from problems import bundled_problems

    problems = [_load_problem_or_exit(r) for r in refs] if refs else list(bundled_problems())
    target = target or default_target()
    options = machine_options(cache_dir)
    reports = []
    for problem in problems:
        with err.status(f"checking {problem.id}…"):
            report = admit(problem, target, options)
        reports.append(report)
        if as_json:
            sys.stdout.write(json.dumps(report.to_dict()) + "\n")
    if not as_json:
        columns = [Column("problem", key=True), Column("admitted", key=True), Column("forward ms", "right", key=True),
                   Column("output"), Column("reasons")]
        show_rows(out, columns, [
            [r.problem_id, Text("yes", "green") if r.admitted else Text("no", "red"), fmt_number(r.forward_ms, ".1f"),
             " ".join(str(list(s)) for s in r.output_shapes), "; ".join(r.reasons)] for r in reports],
            title=f"admission on {target.value}")
        for report in reports:  # whole, under the table: advice to act on, never cut by a column
            for suggestion in report.suggestions:
                out.print(f"[cyan]suggestion[/] for {escape(report.problem_id)}: {escape(suggestion)}", highlight=False)
    raise typer.Exit(1 if any(not r.admitted for r in reports) else 0)


@problems_app.command("import")
def problems_import(
    folder: Annotated[Path, typer.Argument(help="a folder of KernelBench problem files, used as they are")],
    out_dir: Annotated[Path, typer.Option("--out", help="where the cpu-ready problems and suite.txt go")],
    budget_mb: Annotated[float, typer.Option(help="one trial's inputs, parameters and outputs on the cpu")] = 16,
    cache_dir: CacheOpt = None,
) -> None:
    """Size each problem of FOLDER for the cpu target, check it admits, write it with its declarations
    (the original text unchanged) to --out, and a bench suite of the admitted ones; exit 1 if any is refused."""
    from cli.problem_import import ImportOutcome, import_folder

    if not folder.is_dir():
        err.print(f"[red]error:[/red] {folder} is not a folder")
        raise typer.Exit(EXIT_USAGE)
    table = Table(title=f"import of {folder} for the cpu target (budget {budget_mb:g} MB a trial)")
    for col in ("problem", "admitted", "size (full → cpu)", "CPU_SIZES", "reasons"):
        table.add_column(col)
    status = err.status("importing…")

    def show(o: ImportOutcome) -> None:
        status.update(f"imported {o.name}")
        table.add_row(o.name, "[green]yes[/]" if o.admitted else "[red]no[/]", o.summary,
                      ", ".join(f"{k}={v}" for k, v in o.cpu_sizes.items()) + (" RANDOM" if o.random else ""),
                      "; ".join(o.reasons)[:400])

    try:
        with status:
            outcomes = import_folder(folder, out_dir, budget_bytes=int(budget_mb * 1024 * 1024),
                                     options=machine_options(cache_dir), on_outcome=show)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    out.print(table)
    admitted = sum(o.admitted for o in outcomes)
    out.print(f"{admitted} of {len(outcomes)} admitted; suite: {out_dir / 'suite.txt'}", highlight=False)
    raise typer.Exit(0 if admitted == len(outcomes) else 1)


def _register_service_commands() -> None:
    """The service-side commands; their heavy imports happen inside each command."""
    from cli import client, keys, model, modelrun, optimize, service

    app.command("optimize")(optimize.optimize)
    app.command("submit")(client.submit)
    app.command("watch")(client.watch)
    app.command("jobs")(client.jobs)
    app.command("cancel")(client.cancel)
    app.command("messages")(client.messages)
    app.command("logs")(client.logs)
    app.command("replay")(client.replay)
    app.command("bench")(client.bench)
    app.command("up")(service.up)
    app.command("serve")(service.serve_api)
    app.command("worker")(service.worker)
    app.add_typer(keys.keys_app, name="keys")
    model.model_app.command("optimize")(modelrun.optimize_model)
    app.add_typer(model.model_app, name="model")


_register_service_commands()

if __name__ == "__main__":
    app()
