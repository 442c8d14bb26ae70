"""Device specs and the roofline: how fast a problem could possibly run on this device.

``sol_ms = max(FLOPs / peak rate, minimum bytes / bandwidth)``, with FLOPs counted by
``torch.utils.flop_counter`` on the reference (matmuls, convolutions) plus an estimate for the
ops it leaves at zero (pointwise, reductions, pooling, softmax, normalisations: `count_flops`),
and the minimum bytes being inputs + outputs + parameters and buffers, each moved once. Peak
rates come from a table of datasheet figures (fp32 without TF32, since TF32 is off) or are
measured where the device is unknown; bandwidth is always measured (a large device-to-device
copy, bytes read plus written), each the best of several rounds, once per machine
(`harness.devicerecord`). Runs in sandboxes.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vocabulary.devices import DeviceSpecs

__all__ = ["DeviceSpecs", "count_flops", "device_specs", "host_loaded", "min_bytes", "sol_ms"]

#: Dense datasheet rates in FLOP/s by a substring of the device name (SXM parts).
_PEAKS = {
    "H200": {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12, "nominal_bw": 4.8e12},
    "H100": {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12, "nominal_bw": 3.35e12},
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "nominal_bw": 2.0e12},
    "L40S": {"fp32": 91.6e12, "tf32": 183e12, "bf16": 362e12, "fp16": 362e12, "nominal_bw": 0.864e12},
}
_BW_BYTES_CUDA = 1 << 30
#: 64 MB each way on the CPU: beyond the last-level caches, yet one copy (~10 ms) fits in a
#: scheduler slice, so on a busy host some rounds still run uninterrupted.
_BW_BYTES_CPU = 1 << 26
#: Rounds of each measurement, the best kept: other work on the host only ever lowers a
#: measured rate. On the CPU each round starts after a short sleep (a woken process usually runs
#: a whole slice before it is preempted): five fresh processes on a 2-core host under a load of 8
#: measured fp32 peaks 5.7x apart with a single burst of four calls, 1.3x with these.
MEASURE_ROUNDS = 12
_CPU_ROUND_PAUSE_S = 0.02


def _cpu_pause(device: torch.device) -> None:
    if device.type == "cpu":
        time.sleep(_CPU_ROUND_PAUSE_S)


def _measure_bandwidth(device: torch.device) -> float:
    """Bytes/s of a large copy (read plus written), the best of `MEASURE_ROUNDS`."""
    n = (_BW_BYTES_CUDA if device.type == "cuda" else _BW_BYTES_CPU) // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch of the pages, outside the rounds
    best = float("inf")
    for _ in range(MEASURE_ROUNDS):
        _cpu_pause(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            torch.cuda.synchronize(device)
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - t0
        best = min(best, seconds)
    return 2 * n * 4 / best


def _measure_fp32_peak(device: torch.device) -> float:
    """FLOP/s of a square fp32 matmul, the best of `MEASURE_ROUNDS` after a warm-up call."""
    size = 4096 if device.type == "cuda" else 512
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    a @ b  # warm-up: the BLAS's own buffers and threads
    best = float("inf")
    for _ in range(MEASURE_ROUNDS):
        _cpu_pause(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best


def host_loaded() -> bool:
    """Whether the load average exceeds the cores this process may use (measured rates may be low)."""
    try:
        return os.getloadavg()[0] > len(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return False


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
    """Specs of the device this process runs on: bandwidth (and, where no datasheet knows the
    device, the fp32 peak) measured, the best of `MEASURE_ROUNDS` each (~1 s on a CPU). A
    machine's record keeps them (`harness.devicerecord`): jobs do not measure them each."""
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


#: FLOPs per input element of ops that torch's counter leaves out and that carry no pointwise or
#: reduction tag: softmax (max, subtract, exp, sum, divide), its log form, normalisations (mean,
#: variance, normalise, scale, shift), pooling (about one per element read).
_PER_ELEMENT_FLOPS = {"_softmax": 5, "_log_softmax": 5, "native_layer_norm": 8, "native_group_norm": 8,
                      "native_batch_norm": 8, "_native_batch_norm_legit": 8,
                      "_native_batch_norm_legit_no_training": 8, "avg_pool2d": 1, "max_pool2d_with_indices": 1,
                      "max_pool2d": 1, "_adaptive_avg_pool2d": 1, "avg_pool3d": 1, "max_pool3d_with_indices": 1}


def _numel(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (list, tuple)):
        return sum(_numel(v) for v in value)
    return 0


class _ElementwiseFlops(TorchDispatchMode):
    """Estimates the FLOPs of the ops torch's counter leaves at zero: one per output element of
    a pointwise op (an exp or a tanh counts as one), one per input element of a reduction, and
    `_PER_ELEMENT_FLOPS` per input element of softmax, the normalisations and pooling."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        from torch.utils.flop_counter import flop_registry

        packet = func._overloadpacket
        if packet in flop_registry:
            return out  # counted by torch's counter
        name = packet.__name__
        tags = getattr(func, "tags", ())
        if name in _PER_ELEMENT_FLOPS:
            self.flops += _PER_ELEMENT_FLOPS[name] * _numel(args[0] if args else None)
        elif torch.Tag.reduction in tags:
            self.flops += _numel(args[0] if args else None)
        elif torch.Tag.pointwise in tags:
            self.flops += _numel(out)
        return out


def count_flops(model: torch.nn.Module, inputs: list[Any]) -> float:
    """FLOPs of one forward: matmuls and convolutions as ``torch.utils.flop_counter`` counts them,
    plus an estimate for pointwise ops, reductions, softmax and normalisations (`_ElementwiseFlops`),
    which torch's counter leaves at zero (a softmax problem's roofline had no compute floor)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    elementwise = _ElementwiseFlops()
    with counter, elementwise, torch.no_grad():
        model(*inputs)
    return float(counter.get_total_flops() + elementwise.flops)


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
    return specs.sol_ms(flops, nbytes, str(dtype))
