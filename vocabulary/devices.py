"""`DeviceSpecs`: the device a job's kernels run on, as the reference process measured it.

Standard library only: the referee's driver, the agent (``get_gpu_specs``, the prompt) and the
worker share this value; `harness.sandboxed.roofline` measures it inside the reference process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vocabulary.wire import JsonObject, Reader

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

    def to_dict(self) -> JsonObject:
        return {
            "target": self.target, "name": self.name, "peak_flops": dict(self.peak_flops),
            "measured_bandwidth": self.measured_bandwidth, "peak_source": self.peak_source,
            "compute_capability": self.compute_capability, "multiprocessors": self.multiprocessors,
            "l2_bytes": self.l2_bytes, "memory_bytes": self.memory_bytes,
            "shared_memory_per_block_optin": self.shared_memory_per_block_optin, "driver": self.driver,
            "cuda": self.cuda, "cores": self.cores,
        }

    @classmethod
    def from_dict(cls, data: object) -> DeviceSpecs:
        """From ``to_dict()``'s JSON (keys this version does not know are left out)."""
        r = Reader(data, "the device specs")
        peaks = r.nested("peak_flops", optional=True)
        return cls(
            target=r.text("target"), name=r.text("name"), peak_flops={k: peaks.number(k) for k in peaks.data},
            measured_bandwidth=r.number("measured_bandwidth", 0.0), peak_source=r.text("peak_source", "measured"),
            compute_capability=r.optional_text("compute_capability"),
            multiprocessors=r.optional_integer("multiprocessors"), l2_bytes=r.optional_integer("l2_bytes"),
            memory_bytes=r.optional_integer("memory_bytes"),
            shared_memory_per_block_optin=r.optional_integer("shared_memory_per_block_optin"),
            driver=r.optional_text("driver"), cuda=r.optional_text("cuda"), cores=r.optional_integer("cores"),
        )

    def sol_ms(self, flops: float, nbytes: float, dtype_name: str) -> float:
        """The speed-of-light time of a forward: the larger of its compute and memory floors
        (FLOPs at the peak for outputs of ``dtype_name``; bytes at the measured bandwidth)."""
        compute_s = flops / self.peak_for(dtype_name) if flops else 0.0
        memory_s = nbytes / self.measured_bandwidth if self.measured_bandwidth else 0.0
        return 1e3 * max(compute_s, memory_s)

    def peak_for(self, dtype_name: str) -> float:
        """The peak rate for outputs of this dtype (``str(torch.float16)`` or ``float16``)."""
        return self.peak_flops.get(_PEAK_KEYS.get(dtype_name, "fp32")) or self.peak_flops["fp32"]
