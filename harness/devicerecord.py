"""The device's peak rates and bandwidth, measured once per machine and kept on the trusted side.

Each job's reference used to measure them afresh: on a busy 2-core host one job's fp32 peak was
0.017 TFLOP/s, another's 0.185, and the roofline (``sol_ms``, % of SOL, the "faster than the
roofline" quarantine) swung with them. Now the reference sandbox measures them (best of several
rounds, `harness.sandboxed.roofline`) before the problem's code is loaded, and only while this machine's
record is unsettled (``devices/<target>-<key>.json``, key: machine, target, visible devices,
thread settings, torch and harness versions). The record keeps every measurement; what a job uses
is the best of them (other work only ever lowers a measured rate). It settles once one
measurement was taken on an unloaded host or `SETTLE_AFTER` were taken; after that no job
measures again. Standard library only: `harness.reference.ReferenceClient` reads and writes it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from harness.baselinerecord import machine_id
from harness.recordfile import RecordFile
from vocabulary.devices import DeviceSpecs
from vocabulary.provenance import HARNESS_VERSION
from vocabulary.wire import JsonObject, Reader

__all__ = ["SETTLE_AFTER", "DeviceRecord", "Measurement"]

#: Measurements after which the record settles even if every one was taken on a loaded host.
SETTLE_AFTER = 3
#: Bumped when the way the rates are measured changes (1: best of rounds, once per machine).
_RECIPE = "1"


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One measurement of the device: its specs and whether the host was loaded meanwhile."""

    specs: DeviceSpecs
    host_loaded: bool

    def to_dict(self) -> JsonObject:
        return {"specs": self.specs.to_dict(), "host_loaded": self.host_loaded}

    @classmethod
    def from_dict(cls, data: object) -> Measurement:
        r = Reader(data, "a device measurement")
        return cls(specs=DeviceSpecs.from_dict(r.data.get("specs")), host_loaded=r.flag("host_loaded", True))


class DeviceRecord:
    """This machine's device measurements for one target (see the module's docstring).

    Args:
        directory: the cache's ``devices/`` directory.
        target: ``cuda`` or ``cpu``.
        environment: what else the rates depend on (thread settings, visible devices), as the
            sandboxes get it.
    """

    def __init__(self, directory: Path, target: str, environment: dict[str, str]) -> None:
        material = {"machine": machine_id(), "target": target, "torch": _torch_version(),
                    "harness": HARNESS_VERSION, "recipe": _RECIPE, "env": dict(sorted(environment.items())),
                    "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
        key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]
        self._file = RecordFile(directory / f"{target}-{key}.json", parse=Measurement.from_dict,
                                dump=Measurement.to_dict, limit=2 * SETTLE_AFTER)

    def measurements(self) -> list[Measurement]:
        return self._file.read()

    def settled(self) -> bool:
        """Whether no job needs to measure any more."""
        return len(self.measurements()) >= SETTLE_AFTER or self.measured_unloaded()

    def measured_unloaded(self) -> bool:
        """Whether any measurement was taken on an unloaded host (the rates are then believed)."""
        return any(not m.host_loaded for m in self.measurements())

    def best(self) -> DeviceSpecs | None:
        """The latest measurement's specs with the highest rates any measurement found."""
        found = self.measurements()
        if not found:
            return None
        peaks: dict[str, float] = {}
        for m in found:
            for name, rate in m.specs.peak_flops.items():
                peaks[name] = max(peaks.get(name, 0.0), rate)
        return replace(found[-1].specs, peak_flops=peaks,
                       measured_bandwidth=max(m.specs.measured_bandwidth for m in found))

    def add(self, measurement: Measurement) -> None:
        self._file.append(measurement)
