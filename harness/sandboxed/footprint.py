"""What one trial of a problem needs in memory, computed on the meta device (runs in sandboxes).

``get_inputs``, ``Model(*get_init_inputs())`` and, where the ops allow, the forward run under
``torch.device("meta")``: tensors get shapes and dtypes but no storage, so a problem sized for a
GPU (KernelBench's ``19_ReLU`` draws a 6.4 GB input) is measured without allocating it, and
refused on the cpu target with the figure before anything is built.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from typing import Any

import torch

from harness.protocol.admission import Footprint, format_bytes
from harness.sandboxed.compare import flatten_output
from harness.sandboxed.contract import overridden
from vocabulary.wire import JsonValue

__all__ = ["measure", "over_budget", "refusal"]


def _nbytes(values: Any) -> int:
    flat = flatten_output(values) if not isinstance(values, (list, tuple)) else [
        v for v in values if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in flat or [])


def measure(module: types.ModuleType) -> Footprint:
    """The footprint of the module's ``get_inputs`` and ``Model`` as its constants are now.

    Raises:
        Exception: whatever ``get_inputs`` or ``Model`` raise on the meta device (``.item()``,
            a data-dependent shape): the caller treats the footprint as unknown.
    """
    with torch.device("meta"):
        inputs = list(module.get_inputs())
        model = module.Model(*module.get_init_inputs())
    parameters = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    outputs: int | None
    try:
        with torch.no_grad(), torch.device("meta"):
            outputs = _nbytes(model(*[x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]))
    except Exception:  # noqa: BLE001 - an op without a meta kernel: the output's size stays unknown
        outputs = None
    return Footprint(_nbytes(inputs), parameters, outputs)


def refusal(footprint: Footprint, budget_bytes: int) -> str | None:
    """Why a problem with this footprint is refused on the cpu target, or None if it fits."""
    if footprint.total <= budget_bytes:
        return None
    parts = f"inputs {format_bytes(footprint.inputs)}, parameters {format_bytes(footprint.parameters)}" + (
        f", outputs {format_bytes(footprint.outputs)}" if footprint.outputs is not None else "")
    return (f"inputs need {format_bytes(footprint.total)} ({parts}); the CPU budget is "
            f"{format_bytes(budget_bytes)}: declare CPU_SIZES (`kernelloop problems import` finds them)")


def over_budget(module: types.ModuleType, trial_overrides: list[Mapping[str, JsonValue]],
                budget_bytes: int) -> str | None:
    """Why the trials (one override set each, as `harness.seeds.TrialSpec` holds them) do not
    fit the budget, or None; a footprint the meta device cannot compute is not refused here (the
    sandbox's memory limit still holds)."""
    for overrides in {json.dumps(o, sort_keys=True): o for o in trial_overrides}.values():
        with overridden(module, overrides):
            try:
                found = measure(module)
            except Exception:  # noqa: BLE001 - unknown sizes
                continue
        reason = refusal(found, budget_bytes)
        if reason:
            return reason
    return None
