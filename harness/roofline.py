"""Device specs and the roofline: how fast a problem could possibly run on this device.

``sol_ms = max(FLOPs / peak rate, minimum bytes / bandwidth)``, with FLOPs counted by
``torch.utils.flop_counter`` on the reference and the minimum bytes being inputs + outputs +
parameters and buffers, each moved once. Peak rates come from a table of datasheet figures
(fp32 without TF32, since TF32 is off) or are measured where the device is unknown; bandwidth is
always measured (a large device-to-device copy, bytes read plus written). Runs in stage processes.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import torch

from harness.devices import DeviceSpecs

__all__ = ["DeviceSpecs", "count_flops", "device_specs", "min_bytes", "sol_ms"]

#: Dense datasheet rates in FLOP/s by a substring of the device name (SXM parts).
_PEAKS = {
    "H200": {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12, "nominal_bw": 4.8e12},
    "H100": {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12, "nominal_bw": 3.35e12},
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "nominal_bw": 2.0e12},
    "L40S": {"fp32": 91.6e12, "tf32": 183e12, "bf16": 362e12, "fp16": 362e12, "nominal_bw": 0.864e12},
}
_BW_BYTES_CUDA = 1 << 30
_BW_BYTES_CPU = 1 << 27


def _measure_bandwidth(device: torch.device) -> float:
    n = (_BW_BYTES_CUDA if device.type == "cuda" else _BW_BYTES_CPU) // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            torch.cuda.synchronize(device)
            seconds = start.elapsed_time(end) / 1e3
        else:
            import time

            t0 = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - t0
        best = min(best, seconds)
    return 2 * n * 4 / best


def _measure_fp32_peak(device: torch.device) -> float:
    size = 4096 if device.type == "cuda" else 512
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    import time

    best = float("inf")
    for _ in range(4):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


def _driver_version() -> str | None:
    try:
        with open("/proc/driver/nvidia/version") as fh:
            first = fh.readline()
        for token in first.split():
            if token.count(".") >= 1 and token.replace(".", "").isdigit():
                return token
    except OSError:
        pass
    return None


def device_specs(device: torch.device) -> DeviceSpecs:
    """Specs of the device this process runs on (measures bandwidth, ~0.1 s)."""
    bandwidth = _measure_bandwidth(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        peaks: dict[str, float] = {}
        source = "measured"
        for key, table in _PEAKS.items():
            if key in props.name:
                peaks = {k: v for k, v in table.items() if k != "nominal_bw"}
                source = f"datasheet ({key})"
                break
        if not peaks:
            peaks = {"fp32": _measure_fp32_peak(device)}
        return DeviceSpecs(
            target="cuda",
            name=props.name,
            compute_capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            l2_bytes=getattr(props, "L2_cache_size", None),
            memory_bytes=props.total_memory,
            shared_memory_per_block_optin=getattr(props, "shared_memory_per_block_optin", None),
            peak_flops=peaks,
            measured_bandwidth=bandwidth,
            peak_source=source,
            driver=_driver_version(),
            cuda=torch.version.cuda,
        )
    return DeviceSpecs(
        target="cpu",
        name=platform.processor() or platform.machine(),
        compute_capability=None,
        multiprocessors=None,
        l2_bytes=None,
        memory_bytes=None,
        shared_memory_per_block_optin=None,
        peak_flops={"fp32": _measure_fp32_peak(device)},
        measured_bandwidth=bandwidth,
        peak_source="measured",
        driver=None,
        cuda=None,
        cores=os.cpu_count(),
    )


def count_flops(model: torch.nn.Module, inputs: list[Any]) -> float:
    """FLOPs of one forward, as ``torch.utils.flop_counter`` counts them (matmuls, convs...)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(*inputs)
    return float(counter.get_total_flops())


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def min_bytes(inputs: list[Any], outputs: Any, model: torch.nn.Module) -> float:
    """Each input, output, parameter and buffer moved through memory once."""
    state = sum(_nbytes(t) for t in model.state_dict().values())
    return float(_nbytes(inputs) + _nbytes(outputs) + state)


def sol_ms(flops: float, nbytes: float, specs: DeviceSpecs, dtype: torch.dtype) -> float:
    """The speed-of-light time: the larger of the compute and the memory floor."""
    compute_s = flops / specs.peak_for(str(dtype)) if flops else 0.0
    memory_s = nbytes / specs.measured_bandwidth if specs.measured_bandwidth else 0.0
    return 1e3 * max(compute_s, memory_s)
