"""Compare a candidate's output with the reference's: the numerics rules of the evaluation contract
(docs/architecture.md).

Runs in the trusted reference process only. Structure, shape, dtype and device type must match
exactly; NaN and inf must match in place; integers and booleans compare exactly; floats by
``|a - b| <= atol + rtol * |b|``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Comparison", "compare_outputs", "flatten_output"]


@dataclass(frozen=True)
class Comparison:
    passed: bool
    max_abs_err: float | None
    mean_abs_err: float | None
    mismatch_frac: float
    message: str = ""


def flatten_output(output: Any) -> list[torch.Tensor] | None:
    """A forward's output as a list of tensors (tensor, or tuple/list of tensors), else None."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in output):
        return list(output)
    return None


def _fail(message: str) -> Comparison:
    return Comparison(False, None, None, 1.0, message)


def compare_outputs(expected: list[torch.Tensor], actual: Any, *, atol: float | None,
                    rtol: float | None, tolerance_for: Any) -> Comparison:
    """Compare one trial's outputs.

    Args:
        expected: the reference outputs (flattened).
        actual: what the candidate returned (already loaded and validated as tensors).
        atol, rtol: the problem's override, or None for the per-dtype default.
        tolerance_for: ``dtype name -> float``, the default tolerance.
    """
    got = flatten_output(actual)
    if got is None:
        return _fail(f"forward returned {type(actual).__name__}, expected tensor output(s)")
    if len(got) != len(expected):
        return _fail(f"forward returned {len(got)} tensors, expected {len(expected)}")
    max_err = 0.0
    err_sum = 0.0
    mismatched = 0
    total = 0
    for i, (ref, out) in enumerate(zip(expected, got, strict=True)):
        where = f"output {i}: " if len(expected) > 1 else ""
        if tuple(out.shape) != tuple(ref.shape):
            return _fail(f"{where}shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
        if out.dtype != ref.dtype:
            return _fail(f"{where}dtype {out.dtype}, expected {ref.dtype}")
        if out.device.type != ref.device.type:
            return _fail(f"{where}device {out.device.type}, expected {ref.device.type}")
        out = out.to(ref.device)
        total += ref.numel()
        if ref.numel() == 0:
            continue
        if not ref.is_floating_point() and not ref.is_complex():
            diff_mask = out != ref
            mismatched += int(diff_mask.sum())
            if bool(diff_mask.any()):
                max_err = max(max_err, float((out.double() - ref.double()).abs().max()))
            continue
        dtype_name = str(ref.dtype).removeprefix("torch.")
        tol_a = atol if atol is not None else tolerance_for(dtype_name)
        tol_r = rtol if rtol is not None else tolerance_for(dtype_name)
        r = ref.double()
        o = out.double()
        if ref.is_floating_point():
            # The common case, all finite, without the masks below: the same figures in a third of
            # the time (16 MB of float32: 61 ms against 176, most of an audited call's cost:
            # benchmarks/audit_cost.py). A NaN or inf in either makes the sum non-finite; so may a
            # float64 sum that overflows, which the exact masked path then takes. Nothing in place
            # on r or o: ``double()`` of a float64 tensor is that tensor.
            diff = torch.sub(o, r).abs_()
            diff_sum = float(diff.sum())
            if math.isfinite(diff_sum):
                mismatched += int((diff > r.abs().mul_(tol_r).add_(tol_a)).sum())
                max_err = max(max_err, float(diff.max()))
                err_sum += diff_sum
                continue
        special = ~torch.isfinite(r) | ~torch.isfinite(o)
        # NaN must meet NaN, +inf meet +inf: compare the non-finite pattern exactly.
        special_bad = special & ~((torch.isnan(r) & torch.isnan(o)) | (r == o))
        finite = ~special
        diff = torch.where(finite, (o - r).abs(), torch.zeros_like(r))
        bad = (diff > tol_a + tol_r * r.abs()) & finite | special_bad
        mismatched += int(bad.sum())
        if bool(finite.any()):
            max_err = max(max_err, float(diff.max()))
            err_sum += float(diff.sum())
        if bool(special_bad.any()):
            max_err = float("inf")
    frac = mismatched / total if total else 0.0
    mean_err = err_sum / total if total else 0.0
    message = "" if mismatched == 0 else (
        f"{mismatched} of {total} elements ({100 * frac:.3g}%) outside tolerance; max abs error {max_err:.4g}"
    )
    return Comparison(mismatched == 0, max_err, mean_err, frac, message)
