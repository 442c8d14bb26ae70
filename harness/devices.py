"""`DeviceSpecs`: the device a job's kernels run on, as the reference process measured it.

Standard library only: the referee's driver, the agent (``get_gpu_specs``, the prompt) and the
worker share this value; `harness.roofline` measures it inside the reference process.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["DeviceSpecs"]

#: The peak-rate key of a tensor dtype (``str(torch.bfloat16)`` …); anything else runs at fp32.
_PEAK_KEYS = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True, kw_only=True)
class DeviceSpecs:
    """What the agent's ``get_gpu_specs()`` returns, and what the roofline uses."""

    target: str
    name: str
    #: FLOP/s by precision (``fp32``, ``bf16``, ``fp16``, ``tf32``), datasheet or measured.
    peak_flops: dict[str, float] = field(default_factory=dict)
    #: Bytes/s of a large device-to-device copy, measured.
    measured_bandwidth: float = 0.0
    peak_source: str = "measured"
    compute_capability: str | None = None
    multiprocessors: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    shared_memory_per_block_optin: int | None = None
    driver: str | None = None
    cuda: str | None = None
    cores: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceSpecs:
        """From ``to_dict()``'s JSON (keys this version does not know are left out)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def peak_for(self, dtype_name: str) -> float:
        """The peak rate for outputs of this dtype (``str(torch.float16)`` or ``float16``)."""
        return self.peak_flops.get(_PEAK_KEYS.get(dtype_name, "fp32")) or self.peak_flops["fp32"]
