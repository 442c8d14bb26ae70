"""What the commands share: the default target, the machine's harness options and a verdict's
rendering for the terminal.

A leaf module (the commands import it; it imports none of them), so `cli.main`, `cli.optimize`
and `cli.client.replay` share these without a circle of imports.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vocabulary.evaluation import Target
from vocabulary.verdict import ErrorKind, Status, Verdict

if TYPE_CHECKING:  # the client commands import this module and never the harness
    from harness.options import HarnessOptions

__all__ = ["LLM_HELP", "default_target", "fmt_number", "machine_options", "render_verdict", "split_llm",
           "verdict_exit_code"]

#: How every ``kernelloop`` Typer app shows ``--help``: Click's plain layout. (Typer's Rich panels
#: print a type on every flag, ``--help <bool>`` included; the plain layout names only the values
#: an option takes, and wraps as a terminal of any width, or a pipe, expects.)
HELP_STYLE: dict[str, Any] = {"rich_markup_mode": None, "add_completion": False}
#: ``--llm`` of ``optimize`` and ``submit``: the same words, the same meaning.
LLM_HELP = "an LLM profile (scripted, openai, …), optionally PROFILE:MODEL (openai:gpt-4o)"

#: The exit status of a command that judged one candidate (`eval`, `replay`).
EXIT_PASS, EXIT_CANDIDATE_FAILED, EXIT_ERROR = 0, 1, 2
#: What each part of the provenance line is called (its value follows).
_PROVENANCE = (("device", ""), ("torch", "torch "), ("cuda", "CUDA "), ("mode", "mode "), ("policy", "policy "),
               ("seeds", "seeds "), ("sandbox", "sandbox "))


def default_target() -> Target:
    """``cuda`` when an NVIDIA device is present, else ``cpu`` (without importing torch)."""
    return Target.CUDA if os.path.exists("/dev/nvidiactl") else Target.CPU


def machine_options(cache_dir: Path | None = None, **changes: object) -> HarnessOptions:
    """The options of this machine's referees, the service's too (`config.Settings.harness_options`:
    its cache and timing), with ``--cache-dir`` and ``changes`` applied."""
    from config import load_settings

    options = load_settings().harness_options().replace(**changes)
    return options if cache_dir is None else options.replace(cache_dir=cache_dir)


def fmt_number(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def split_llm(llm: str) -> tuple[str, str | None]:
    """``--llm``'s ``PROFILE[:MODEL]``: the profile's name and the model asked for (``None``: the
    profile's own). Only the first colon splits: ``local:org/model:tag`` keeps its tag."""
    profile, _, model = llm.partition(":")
    return profile, (model or None)


def verdict_exit_code(verdict: Verdict) -> int:
    """0 for a pass; 1 for the candidate's failure (wrong, suspicious, or an error of its own: it
    does not compile, it crashes); 2 for an error that is not the candidate's (ours, the problem's
    own code, a cancel), as for misuse."""
    if verdict.status is Status.PASS:
        return EXIT_PASS
    if verdict.status is Status.ERROR and verdict.error_kind is not ErrorKind.CANDIDATE:
        return EXIT_ERROR
    return EXIT_CANDIDATE_FAILED


def render_verdict(verdict: Verdict, console: Console) -> None:
    """A readable summary of a verdict."""
    colour = {"pass": "green", "fail": "red", "error": "red", "suspicious": "yellow"}[verdict.status.value]
    console.print(f"[bold {colour}]{verdict.status.value.upper()}[/] at stage [bold]{verdict.stage.value}[/]"
                  + (f" ({verdict.error_kind.value} error)" if verdict.error_kind else "")
                  + f": {verdict.message}")
    if verdict.compile is not None:
        cached = all(e.cached for e in verdict.compile.extensions) and verdict.compile.extensions
        console.print(f"compile: {'ok' if verdict.compile.ok else 'failed'} in {verdict.compile.seconds:.1f} s"
                      + (" (cached build)" if cached else ""))
        for k in verdict.compile.kernels:
            if k.registers is not None:
                console.print(f"  {k.kernel}: {k.registers} registers, "
                              f"{k.spill_stores or 0} B spill stores, {k.spill_loads or 0} B spill loads")
        if verdict.compile.errors and not verdict.compile.ok:
            console.print(verdict.compile.errors, markup=False, highlight=False)
        for failure in verdict.compile.swallowed:  # the true cause of what follows (vocabulary.causes)
            console.print(f"[red]build failed, caught by the candidate:[/] {failure.name}"
                          + (f" (lazily, in {failure.lazy.value})" if failure.lazy else ""))
            console.print(failure.errors, markup=False, highlight=False)
    if verdict.trials:
        table = Table(title="correctness trials")
        for col in ("trial", "inputs", "result", "max abs err", "mean abs err", "mismatch"):
            table.add_column(col)
        for t in verdict.trials:
            table.add_row(str(t.seed_index), t.kind, "[green]pass[/]" if t.passed else "[red]fail[/]",
                          fmt_number(t.max_abs_err, ".3g"), fmt_number(t.mean_abs_err, ".3g"),
                          f"{100 * t.mismatch_frac:.3g}%")
        console.print(table)
    if verdict.timing is not None:
        table = Table(title="timing (median of n runs)")
        for col in ("", "median ms", "IQR ms", "n", "speedup"):
            table.add_column(col)
        table.add_row("candidate", fmt_number(verdict.timing.median_ms, ".4f"),
                      fmt_number(verdict.timing.iqr_ms, ".4f"), str(verdict.timing.n), "")
        if verdict.baselines:
            baselines = verdict.baselines
            for name, timing, speedup in (("eager", baselines.eager, verdict.speedup_vs_eager),
                                          ("torch.compile", baselines.torch_compile, verdict.speedup_vs_compile)):
                if timing is not None:
                    table.add_row(name, fmt_number(timing.median_ms, ".4f"), fmt_number(timing.iqr_ms, ".4f"),
                                  str(timing.n), fmt_number(speedup, ".2f", "x"))
        console.print(table)
        console.print(f"roofline: {fmt_number(verdict.sol_ms, '.4f', ' ms')} at speed of light, "
                      f"{fmt_number(verdict.pct_of_sol, '.1f', '%')} of it reached")
        for warning in verdict.timing.warnings:
            console.print(f"[yellow]timing:[/] {warning}")
    for flag in verdict.flags:
        console.print(f"[yellow]flag:[/] {flag}")
    for hint in verdict.hints:
        console.print(f"[cyan]hint:[/] {hint}")
    for note in verdict.notes:
        console.print(f"[cyan]note:[/] {note}")
    prov = verdict.provenance.to_dict()
    # Only what is known: a candidate that never reached the device has no device, torch, …
    known = [f"{label}{'+'.join(map(str, v)) or 'none' if isinstance(v, list) else v}"
             for name, label in _PROVENANCE if (v := prov.get(name)) not in (None, "")]
    if known:
        console.print(f"[dim]{escape(' · '.join(known))}[/]")
    if verdict.log and verdict.status is Status.ERROR and verdict.stage.value != "compile":
        console.print("[dim]log:[/]")
        console.print(verdict.log[-3000:], markup=False, highlight=False)
