"""The metered loop in this process, driven by a thread of its own: for benchmarks and tools that
time a trusted callable exactly as candidates and baselines are timed (imports torch).

Not for untrusted code: there is no sandbox and no second process. `time_locally` binds the loop on
its first use in a process (the loop binds once). It lives with the sandbox side because it is the
sandbox side's `Meter` (and torch) in this process, with the driver's `harness.meter.drive` on a
thread; the referee never imports it.
"""

from __future__ import annotations

import functools
import socket
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from harness.channel import Channel
from harness.meter.build import meter_library
from harness.meter.drive import CallPlan, MeteredRun, drive
from harness.sandboxed import contract
from harness.sandboxed.meter import Meter

__all__ = ["time_locally"]


@functools.cache
def _meter(builds_dir: Path, device: str) -> Meter:
    contract.tf32_off()
    return Meter.load(meter_library(builds_dir), torch.device(device))


def time_locally(fn: Callable[..., Any], sets: Sequence[Sequence[Any]], plan: CallPlan, *, device: torch.device,
                 builds_dir: Path, flush: bool = True, timeout_s: float = 600.0) -> MeteredRun:
    """Time ``fn`` over input ``sets`` in the metered loop, driven as the referee drives it."""
    meter = _meter(builds_dir, device.type)
    ours, theirs = socket.socketpair()
    driver_side, loop_side = Channel(ours), Channel(theirs)
    result: list[MeteredRun] = []
    failure: list[BaseException] = []

    def drive_it() -> None:
        try:
            result.append(drive(driver_side, plan, timeout_s=timeout_s))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)
            driver_side.close()

    thread = threading.Thread(target=drive_it, name="kl-meter-driver", daemon=True)
    thread.start()
    try:
        meter.run(loop_side, fn, sets, flush=flush)
    finally:
        thread.join(timeout_s)
        driver_side.close()
        loop_side.close()
    if failure:
        raise failure[0]
    return result[0]
