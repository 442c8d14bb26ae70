"""Moving a forward's outputs from the untrusted candidate process to the trusted comparer.

The candidate writes its outputs as a ``torch.save`` file in its private directory and sends
the file's name; the comparer checks the path stays inside that directory, checks the size,
loads it with ``weights_only=True`` (no pickle code runs) and validates that it is a list of
tensors. Inputs are never shipped: each side regenerates them from the trial's seed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

__all__ = ["OutputRejected", "export_output", "import_output"]

#: Accepted outputs are at most this many times the expected size (plus a small allowance).
_SIZE_SLACK = 2
_SIZE_ALLOWANCE = 1 << 20


class OutputRejected(ValueError):
    """The candidate's output file is missing, too large, or not tensors."""


def export_output(output: Any, directory: Path, name: str) -> dict[str, Any]:
    """Save a forward's output for the comparer; non-tensor outputs are described, not saved."""
    if isinstance(output, torch.Tensor):
        tensors, single = [output], True
    elif isinstance(output, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in output):
        tensors, single = list(output), False
    else:
        return {"kind": "invalid", "type": type(output).__name__}
    path = directory / f"{name}.pt"
    payload = [t.detach().to("cpu") for t in tensors]
    # Device is part of the contract; the file holds CPU copies, so record where they came from.
    torch.save({"tensors": payload, "devices": [t.device.type for t in tensors], "single": single}, path)
    return {"kind": "file", "name": path.name}


def import_output(desc: dict[str, Any], directory: Path, *, expected_bytes: int, device: torch.device) -> Any:
    """Load and validate what `export_output` wrote; returns a tensor or a list of tensors."""
    if desc.get("kind") == "invalid":
        raise OutputRejected(f"forward returned {desc.get('type')}, expected tensor output(s)")
    name = desc.get("name")
    if desc.get("kind") != "file" or not isinstance(name, str) or "/" in name or name.startswith("."):
        raise OutputRejected("malformed output descriptor")
    path = directory / name
    real = Path(os.path.realpath(path))
    if real.parent != Path(os.path.realpath(directory)) or not real.is_file():
        raise OutputRejected("output file missing or outside the candidate's directory")
    size = real.stat().st_size
    if size > _SIZE_SLACK * expected_bytes + _SIZE_ALLOWANCE:
        raise OutputRejected(f"output file of {size} bytes; expected about {expected_bytes}")
    try:
        data = torch.load(real, weights_only=True, map_location="cpu")
    except Exception as exc:
        raise OutputRejected(f"unreadable output: {type(exc).__name__}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tensors"), list):
        raise OutputRejected("malformed output file")
    tensors = data["tensors"]
    devices = data.get("devices", [])
    if not all(isinstance(t, torch.Tensor) for t in tensors) or len(devices) != len(tensors):
        raise OutputRejected("output file holds something other than tensors")
    # A tensor from the wrong device stays on the CPU, so the comparer reports the mismatch.
    moved = [t.to(device) if dev == device.type else t for t, dev in zip(tensors, devices, strict=True)]
    return moved[0] if data.get("single") and len(moved) == 1 else moved
