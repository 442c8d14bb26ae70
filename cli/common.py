"""What the commands share: the default target and a verdict's rendering for the terminal.

A leaf module (the commands import it; it imports none of them), so `cli.main`, `cli.optimize`
and `cli.client.replay` share these without a circle of imports.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table

from harness import Status, Target, Verdict

__all__ = ["default_target", "fmt_number", "render_verdict"]


def default_target() -> Target:
    """``cuda`` when an NVIDIA device is present, else ``cpu`` (without importing torch)."""
    return Target.CUDA if os.path.exists("/dev/nvidiactl") else Target.CPU


def fmt_number(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


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
            for name, timing, speedup in (("eager", verdict.baselines.eager, verdict.speedup_vs_eager),
                                          ("torch.compile", verdict.baselines.compiled, verdict.speedup_vs_compile)):
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
    prov = verdict.provenance.to_dict()
    console.print(f"[dim]{prov.get('device')} · torch {prov.get('torch')} · CUDA {prov.get('cuda')} · "
                  f"mode {prov.get('mode')} · policy {prov.get('policy')} · seeds {prov.get('seeds')} · "
                  f"sandbox {prov.get('sandbox')}[/]")
    if verdict.log and verdict.status is Status.ERROR and verdict.stage.value != "compile":
        console.print("[dim]log:[/]")
        console.print(verdict.log[-3000:], markup=False, highlight=False)
