"""Capturing a model's forward as graphs: the whole model, or the parts of it that can be.

``torch.export`` (non-strict) of the model at its inputs, chosen by measurement
(docs/own-models.md): it captures every one of the test models and a transformers GPT-2 block,
which ``torch.fx.symbolic_trace`` cannot; its graph holds ATen operations with their ``pointwise``
tags, every value's shape, and the model's own parameter objects. The sizes that follow the model's
size constants (those its ``CPU_SIZES`` changes) are captured as dynamic dimensions, so the regions'
code reads them off its inputs and the extracted problems run at the CPU sizes too; where the model
cannot be captured that way, it is captured at fixed sizes.

Where the whole model cannot be captured (control flow on tensor values, shapes it computes from
data), each submodule is tried in turn, top down, at the inputs it received in one eager call: the
parts that can be captured are *units* and give regions; the rest is reported, part by part, with
the reason. Sandbox side (torch).
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx as fx
from torch.export import Dim

from harness.sandboxed.regions.codegen import SizeName
from harness.sandboxed.regions.runtime import capture

__all__ = ["CaptureFailure", "Unit", "capture_units", "dynamic_dims"]

#: How much of an export error is kept (they quote the model's code and the guard that failed).
_REASON_CHARS = 600


@dataclass
class Unit:
    """A captured part of the model: its path (``""`` for the whole model), module and graph."""

    path: str
    module: torch.nn.Module
    graph_module: fx.GraphModule
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    sizes: dict[sympy.Symbol, SizeName]


@dataclass(frozen=True)
class CaptureFailure:
    """A part that could not be captured, and why (the export error, with the model's line)."""

    path: str
    reason: str


def dynamic_dims(full: Sequence[Any], cpu: Sequence[Any]) -> list[list[int]]:
    """For each input, the dimensions whose size differs between the full and the CPU sizes."""
    dims: list[list[int]] = []
    for a, b in zip(full, cpu, strict=False):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == b.dim():
            dims.append([d for d in range(a.dim()) if a.shape[d] != b.shape[d]])
        else:
            dims.append([])
    return dims


def _reason(exc: BaseException, model_file: str, source_lines: Sequence[str] = ()) -> str:
    """The export error's first lines, led by the model's own line that it failed at."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(model_file)]
    where = ""
    if frames:
        number = frames[-1].lineno or 0
        line = frames[-1].line or (source_lines[number - 1] if 0 < number <= len(source_lines) else "")
        where = f"{frames[-1].filename}, line {number}: {line.strip()}\n"
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = [line for line in text.splitlines() if line.strip()][:6]
    return (where + "\n".join(lines))[:_REASON_CHARS]


def _size_names(graph_module: fx.GraphModule, dims: list[list[int]], full: Sequence[Any], cpu: Sequence[Any],
                constants: Mapping[str, tuple[int, int]]) -> dict[sympy.Symbol, SizeName]:
    """Each dynamic size of the capture, named after the model constant with its full and CPU
    values (first in the file), else ``dim<k>``."""
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    found: dict[sympy.Symbol, SizeName] = {}
    for index, node in enumerate(placeholders[: len(dims)]):
        value = node.meta.get("val")
        for d in dims[index]:
            dim = value.shape[d] if isinstance(value, torch.Tensor) else None
            if not isinstance(dim, torch.SymInt):
                continue
            expr = dim.node.expr
            if not isinstance(expr, sympy.Symbol) or expr in found:
                continue
            pair = (int(full[index].shape[d]), int(cpu[index].shape[d]))
            named = [name for name, values in constants.items() if values == pair
                     and name not in {s.name for s in found.values()}]
            found[expr] = SizeName(named[0] if named else f"dim{len(found)}", *pair)
    return found


def _record_inputs(model: torch.nn.Module, args: Sequence[Any]) -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """The first inputs each submodule receives in one eager call of the model."""
    seen: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
    handles = []
    for path, module in model.named_modules():
        if not path:
            continue

        def hook(mod: torch.nn.Module, a: tuple[Any, ...], kw: dict[str, Any], path: str = path) -> None:
            seen.setdefault(path, (tuple(a), dict(kw)))

        handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(*args)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def capture_units(model: torch.nn.Module, args: Sequence[Any], *, full: Sequence[Any], cpu: Sequence[Any],
                  constants: Mapping[str, tuple[int, int]], model_file: str, model_source: str = ""
                  ) -> tuple[list[Unit], list[CaptureFailure], list[str]]:
    """The model as captured units, the parts that could not be captured, and notes.

    Args:
        model: built, in its mode, on its device.
        args: its inputs at the target's sizes.
        full, cpu: its inputs at the full and at the CPU sizes (on the meta device).
        constants: the model's integer size constants: name → (full value, CPU value).
        model_file: the filename its code was loaded under (to find its lines in tracebacks).
        model_source: its source (to quote those lines).
    """
    lines = model_source.splitlines()
    notes: list[str] = []
    dims = dynamic_dims(full, cpu)
    failures: list[CaptureFailure] = []
    if any(dims):
        spec = tuple({d: Dim.AUTO for d in ds} if isinstance(a, torch.Tensor) else None
                     for a, ds in zip(args, dims, strict=False))
        try:
            with torch.no_grad():
                graph_module = capture(model, args, dynamic_shapes=spec)
            return [Unit("", model, graph_module, tuple(args), {},
                         _size_names(graph_module, dims, full, cpu, constants))], [], notes
        except Exception as exc:  # noqa: BLE001 - tried again at fixed sizes; the reason is a note
            notes.append("captured at fixed sizes (the region problems keep the target's sizes): the capture with "
                         "the sizes that CPU_SIZES changes as dynamic dimensions failed: "
                         + _reason(exc, model_file, lines).splitlines()[-1][:200])
    try:
        with torch.no_grad():
            graph_module = capture(model, args)
        return [Unit("", model, graph_module, tuple(args), {}, {})], [], notes
    except Exception as exc:  # noqa: BLE001 - the model's parts are tried next
        failures.append(CaptureFailure("", _reason(exc, model_file, lines)))
    recorded = _record_inputs(model, args)
    units: list[Unit] = []
    pending = [name for name, _ in model.named_children()]
    while pending:
        path = pending.pop(0)
        if path not in recorded:
            continue
        module = model.get_submodule(path)
        sub_args, sub_kwargs = recorded[path]
        try:
            with torch.no_grad():
                graph_module = capture(module, sub_args, sub_kwargs)
            units.append(Unit(path, module, graph_module, sub_args, sub_kwargs, {}))
        except Exception as exc:  # noqa: BLE001 - reported; its children are tried
            failures.append(CaptureFailure(path, _reason(exc, model_file, lines)))
            pending[:0] = [f"{path}.{name}" for name, _ in module.named_children()]
    if units:
        notes.append("the model as a whole could not be captured: its regions are those of the parts that could "
                     "(captured at fixed sizes)")
    return units, failures, notes
