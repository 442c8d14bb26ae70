"""``kernelloop model …``: bring your own model: profile it, extract its regions, optimise them, patch them back.

- ``profile FILE``: capture the forward, time it on the target, show each region with its
  operations, boundary shapes and dtypes, share of the model's time and ``torch.compile``'s gain.
- ``extract FILE --out DIR``: each region as a problem file, admitted; ``suite.txt``, ``model.json``.
- ``optimize FILE --llm PROFILE``: one agent job per selected region as one model run, here
  (`cli.modelrun`), then the whole patched model verified.
- ``apply FILE (--from RUN | --kernels DIR) --out patched.py``: the kernels in place of their
  regions, the whole model verified and timed by the referee, a standalone ``patched.py``.

The model file is untrusted code: it runs only in the harness's sandboxes. Exit codes: 0
done (apply: the patched model passed), 1 a refusal or a failed verdict, 2 misuse or a model that
fails to build or cannot be captured.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from cli.common import default_target, machine_options
from display import fmt_ms, fmt_pct, fmt_speedup
from vocabulary.evaluation import Target
from vocabulary.modelreport import ApplyReport, KernelChoice
from vocabulary.regionplan import DEFAULT_COVERAGE, ModelProfile, Region, select_regions

if TYPE_CHECKING:  # the referee and the problem parser are imported by the commands that run them
    from harness import HarnessOptions
    from problems import Problem

__all__ = ["load_model", "model_app", "profile_or_exit", "render_profile", "render_report"]

model_app = typer.Typer(help="Bring your own model: profile, extract, optimise and patch its hot regions.",
                        no_args_is_help=True)
err = Console(stderr=True)
out = Console()
EXIT_FAILED, EXIT_USAGE = 1, 2

TargetOpt = Annotated[Target | None, typer.Option("--target", "-t", help="cuda or cpu (default: cuda if present)")]
CacheOpt = Annotated[Path | None, typer.Option("--cache-dir", help="builds, baselines and scratch (default: the "
                                                                   "machine's cache, shared with the service)")]
GainsOpt = Annotated[bool, typer.Option("--compile-gains/--no-compile-gains",
                                        help="also time torch.compile of the model and of each region")]


def load_model(path: Path) -> Problem:
    """The model file as a problem, or exit 2 saying what is wrong with it (nothing is run)."""
    from problems import ProblemFormatError, parse_problem

    if not path.is_file():
        err.print(f"[red]error:[/red] model file {path} not found")
        raise typer.Exit(EXIT_USAGE)
    try:
        return parse_problem(path.read_text(), problem_id=path.name)
    except ProblemFormatError as exc:
        err.print(f"[red]error:[/red] {path} is not a model file: {exc}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None


def profile_or_exit(model: Problem, target: Target, options: HarnessOptions, *, compile_gains: bool) -> ModelProfile:
    """The model's profile, or exit 2 with why it could not be made (the model's file and line)."""
    from harness.modelsandbox import ModelFailed, profile_model

    try:
        with err.status(f"profiling {model.id} on {target.value}: build, capture, regions, profiler, timing…"):
            profile = profile_model(model, target, options, compile_gains=compile_gains)
    except ModelFailed as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        if exc.details:
            err.print(exc.details[-3000:], markup=False, highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    if not profile.regions:
        reasons = "; ".join(f"{path or 'the whole model'}: {why}" for path, why in profile.capture.failures)
        err.print(f"[red]error:[/red] no part of {model.id} could be captured as a graph: {reasons or 'no regions'}",
                  highlight=False)
        raise typer.Exit(EXIT_USAGE)
    return profile


def _shape(region: Region) -> str:
    ins = ", ".join(f"{b.dtype}{list(b.full)}" for b in region.inputs)
    outs = ", ".join(f"{b.dtype}{list(b.full)}" for b in region.outputs)
    return f"{ins} → {outs}"


def render_profile(profile: ModelProfile, console: Console, selected: set[str] | None = None) -> None:
    """The breakdown: the model's time, then each region, largest first."""
    capture = profile.capture
    console.print(f"[bold]{profile.model}[/] on {profile.target} ({profile.device}), mode {profile.mode}: eager "
                  f"{fmt_ms(profile.model_ms)} ms, torch.compile {fmt_ms(profile.compile_ms)} ms; the regions account "
                  f"for {fmt_ms(profile.attributed_ms)} ms of profiled time "
                  f"({fmt_pct(100 * profile.unattributed_fraction)} of the eager time is outside them)",
                  highlight=False)
    console.print(f"captured with {capture.method}" + (" (sizes dynamic)" if capture.dynamic else " (fixed sizes)")
                  + ("" if capture.whole else f"; captured parts: {', '.join(capture.units)}"), highlight=False)
    for path, why in capture.failures:
        console.print(f"[yellow]not captured:[/] {path or 'the whole model'}: {why}", highlight=False)
    for note in (*capture.notes, *profile.notes):
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    table = Table(title=f"{len(profile.regions)} regions, largest first")
    for col in ("region", "kind", "ops", "modules", "×", "inputs → outputs (full sizes)", "share", "ms",
                "eager ms", "compile ms", "compile gain"):
        table.add_column(col)
    for region in sorted(profile.regions, key=lambda r: r.share, reverse=True):
        mark = "[bold]*[/] " if selected and region.name in selected else ""
        kind = "lone vendor call" if region.lone_vendor_call else region.kind
        table.add_row(mark + region.name, kind, " ".join(region.ops), ", ".join(region.modules)[:60],
                      str(len(region.instances)), _shape(region), fmt_pct(100 * region.share), fmt_ms(region.time_ms),
                      fmt_ms(region.eager_ms), fmt_ms(region.compile_ms), fmt_speedup(region.compile_gain))
    console.print(table)
    if selected:
        console.print(f"* the default selection: {len(selected)} regions, {fmt_pct(100 * profile.coverage(selected))} "
                      "of the model's time", highlight=False)


def _profile_json(profile: ModelProfile, selected: list[str]) -> dict[str, object]:
    data = profile.to_dict()
    for region in data["regions"]:  # type: ignore[union-attr]
        region.pop("source", None)  # type: ignore[union-attr]
    return {**data, "selected": selected, "coverage": profile.coverage(selected)}


@model_app.command("profile")
def profile_command(
    file: Annotated[Path, typer.Argument(help="the model file (Model, get_inputs, get_init_inputs)")],
    target: TargetOpt = None,
    compile_gains: GainsOpt = True,
    coverage: Annotated[float, typer.Option(min=0.0, max=1.0, help="the default selection's share")] = DEFAULT_COVERAGE,
    cache_dir: CacheOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="the profile as JSON on stdout")] = False,
) -> None:
    """Capture FILE's forward, time it on the target and show its regions with their shares."""
    model = load_model(file)
    target = target or default_target()
    profile = profile_or_exit(model, target, machine_options(cache_dir), compile_gains=compile_gains)
    selected = [r.name for r in select_regions(profile, coverage=coverage)]
    if as_json:
        sys.stdout.write(json.dumps(_profile_json(profile, selected)) + "\n")
    else:
        render_profile(profile, out, set(selected))


@model_app.command("extract")
def extract_command(
    file: Annotated[Path, typer.Argument(help="the model file")],
    out_dir: Annotated[Path, typer.Option("--out", help="where the region problems, suite.txt and model.json go")],
    target: TargetOpt = None,
    compile_gains: GainsOpt = True,
    coverage: Annotated[float, typer.Option(min=0.0, max=1.0, help="the default selection's share")] = DEFAULT_COVERAGE,
    cache_dir: CacheOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="model.json's content on stdout")] = False,
) -> None:
    """Write each region of FILE as a problem (admitted like any problem), suite.txt and model.json;
    exit 1 if a region of the default selection is refused."""
    from harness.modelextract import MODEL_JSON, ExtractedRegion, extract_regions, model_json

    model = load_model(file)
    target = target or default_target()
    options = machine_options(cache_dir)
    profile = profile_or_exit(model, target, options, compile_gains=compile_gains)
    status = err.status("admitting the regions…")

    def told(outcome: ExtractedRegion) -> None:
        status.update(f"admitted {outcome.name}" if outcome.admitted else f"refused {outcome.name}")

    with status:
        extraction = extract_regions(profile, out_dir, model_file=file.name, options=options, coverage=coverage,
                                     on_region=told)
    refused = [r for r in extraction.regions if not r.admitted and r.name in extraction.selected]
    if as_json:
        sys.stdout.write(json.dumps(model_json(profile, model_file=file.name, selected=extraction.selected,
                                               admissions=extraction.regions)) + "\n")
    else:
        render_profile(profile, out, set(extraction.selected))
        for region in extraction.regions:
            if not region.admitted:
                out.print(f"[red]refused:[/] {region.problem}: {'; '.join(region.reasons)}", highlight=False)
        out.print(f"{len(extraction.admitted)} of {len(extraction.regions)} regions admitted; problems, "
                  f"{out_dir / 'suite.txt'} and {out_dir / MODEL_JSON} written", highlight=False)
    raise typer.Exit(EXIT_FAILED if refused else 0)


def render_report(report: ApplyReport, profile: ModelProfile, console: Console) -> None:
    """Per region: kept or left out and why, its share, its own speedups; then the whole model."""
    table = Table(title=f"{report.model} patched on {report.target}")
    for col in ("region", "share", "own speedup vs eager", "vs torch.compile", "in the model"):
        table.add_column(col)
    for outcome in report.regions:
        kept = "[green]kept[/]" if outcome.included else f"[red]left out[/]: {outcome.reason}"
        table.add_row(outcome.name, fmt_pct(100 * outcome.share), fmt_speedup(outcome.speedup_vs_eager),
                      fmt_speedup(outcome.speedup_vs_compile), kept)
    console.print(table)
    data = report.to_dict()
    verdict = report.verdict
    if verdict is None:
        console.print("[red]no region was kept: the model is unchanged[/]")
    else:
        status = "[green]PASS[/]" if report.passed else f"[red]{verdict.status.value.upper()}[/]"
        console.print(f"whole model: {status} ({verdict.message}); eager {fmt_ms(data['eager_ms'])} ms, "
                      f"torch.compile {fmt_ms(data['compile_ms'])} ms, patched {fmt_ms(data['patched_ms'])} ms: "
                      f"{fmt_speedup(verdict.speedup_vs_eager)} vs eager, {fmt_speedup(verdict.speedup_vs_compile)} "
                      f"vs torch.compile; the shares predicted {fmt_speedup(report.predicted_speedup)} vs eager "
                      f"(Amdahl, {fmt_pct(100 * profile.unattributed_fraction)} of the time outside the regions)",
                      highlight=False)
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)


def _kernels_from_dir(folder: Path, profile: ModelProfile) -> dict[str, KernelChoice]:
    if not folder.is_dir():
        err.print(f"[red]error:[/red] {folder} is not a folder of kernels")
        raise typer.Exit(EXIT_USAGE)
    names = {r.name for r in profile.regions}
    found = {p.stem: KernelChoice(p.read_text()) for p in sorted(folder.glob("*.py")) if p.stem in names}
    strangers = [p.name for p in sorted(folder.glob("*.py")) if p.stem not in names]
    if strangers:
        err.print(f"[yellow]note:[/] {', '.join(strangers)} name no region of the model "
                  f"(its regions: {', '.join(sorted(names))})", highlight=False)
    if not found:
        err.print(f"[red]error:[/red] no kernel in {folder} is named after a region of the model: name them "
                  f"<region>.py, e.g. {min(names)}.py", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    return found


def write_patched(report: ApplyReport, profile: ModelProfile, kernels: Mapping[str, KernelChoice], file: Path,
                  out_path: Path) -> None:
    """The standalone ``patched.py`` with the kept regions."""
    from harness.patchsource import patched_source

    kept = [profile.region(name) for name in report.included]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(patched_source(model_name=file.name, regions=kept, model_path=file, out_path=out_path,
                                       kernels={r.name: kernels[r.name].source for r in kept}))


@model_app.command("apply")
def apply_command(
    file: Annotated[Path, typer.Argument(help="the model file")],
    out_path: Annotated[Path, typer.Option("--out", help="the patched model to write (runs standalone)")],
    from_run: Annotated[int | None, typer.Option("--from", help="a model run: its regions' best kernels")] = None,
    kernels_dir: Annotated[Path | None, typer.Option("--kernels", help="hand-written kernels named <region>.py")]
    = None,
    profile_json: Annotated[Path | None, typer.Option("--profile", help="a model.json of `model extract` "
                                                                        "(default: profile the model now)")] = None,
    target: TargetOpt = None,
    api: Annotated[str | None, typer.Option(help="the API's URL (with --from)")] = None,
    key: Annotated[str | None, typer.Option(help="the API key (with --from)")] = None,
    cache_dir: CacheOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="the report as JSON on stdout")] = False,
) -> None:
    """Put the kernels in place of their regions, verify and time the whole model, write --out."""
    from harness.modelapply import apply_kernels
    from harness.modelextract import read_model_json

    if (from_run is None) == (kernels_dir is None):
        err.print("[red]error:[/red] give one of --from RUN (a model run's kernels) or --kernels DIR")
        raise typer.Exit(EXIT_USAGE)
    model = load_model(file)
    options = machine_options(cache_dir)
    if from_run is not None:
        from cli.client.modelruns import fetch_run_kernels

        profile, kernels = fetch_run_kernels(from_run, model, api=api, key=key)
    else:
        assert kernels_dir is not None
        if profile_json is not None:
            try:
                profile, _ = read_model_json(profile_json)
            except ValueError as exc:
                err.print(f"[red]error:[/red] {exc}", highlight=False)
                raise typer.Exit(EXIT_USAGE) from None
        else:
            profile = profile_or_exit(model, target or default_target(), options, compile_gains=False)
        kernels = _kernels_from_dir(kernels_dir, profile)
    with err.status("applying…") as status:
        report = apply_kernels(model, profile, kernels, target=target or Target(profile.target), options=options,
                               model_name=file.name, on_progress=status.update)
    if report.included:
        write_patched(report, profile, kernels, file, out_path)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict()) + "\n")
    else:
        render_report(report, profile, out)
        if report.included:
            out.print(f"patched model: {out_path} (run it: python {out_path})", highlight=False)
    raise typer.Exit(0 if report.passed else EXIT_FAILED)
