"""Which processes ``kernelloop up`` starts, and what they share: one embedded worker per GPU
(`detect_gpus` without torch, `plan_workers`), and one multi-process metrics directory
(`shared_metrics_dir`) for the API and workers whose metrics one scrape adds up."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["METRICS_DIR_ENV", "WorkerPlan", "detect_gpus", "plan_workers", "shared_metrics_dir"]


@dataclass(frozen=True)
class WorkerPlan:
    """One embedded worker process: its target and the GPU it sees (``None``: no restriction)."""

    target: str
    cuda_visible_devices: str | None = None

    @property
    def label(self) -> str:
        return self.target if self.cuda_visible_devices is None else f"{self.target}:{self.cuda_visible_devices}"


def detect_gpus(environ: dict[str, str] | None = None, proc_dir: Path = Path("/proc/driver/nvidia/gpus")) -> list[str]:
    """The GPUs this machine offers, as ``CUDA_VISIBLE_DEVICES`` values (without importing torch).

    ``CUDA_VISIBLE_DEVICES``, when set, is the answer; otherwise one index per GPU the NVIDIA
    driver lists (``/proc/driver/nvidia/gpus``, else ``nvidia-smi -L``).
    """
    environ = dict(os.environ) if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    count = 0
    if proc_dir.is_dir():
        count = sum(1 for entry in proc_dir.iterdir() if entry.is_dir())
    elif shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
            count = sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(count)]


def plan_workers(*, gpus: Sequence[str], workers: int | None = None, target: str | None = None) -> list[WorkerPlan]:
    """Which embedded workers ``up`` starts: one per GPU (``cuda``), else ``workers`` CPU ones.

    Args:
        gpus: the GPUs found (`detect_gpus`).
        workers: how many worker processes; on ``cuda`` they take the GPUs round-robin
            (more than one per GPU share it: the timing lock keeps their timings apart).
        target: ``cuda`` or ``cpu``; default: ``cuda`` when there is a GPU.
    """
    target = target or ("cuda" if gpus else "cpu")
    if target == "cuda":
        if not gpus:
            raise ValueError("--target cuda, but no GPU was found (nvidia driver, CUDA_VISIBLE_DEVICES)")
        count = workers or len(gpus)
        return [WorkerPlan("cuda", gpus[i % len(gpus)]) for i in range(count)]
    if target != "cpu":
        raise ValueError(f"unknown target {target!r}: use cuda or cpu")
    return [WorkerPlan("cpu") for _ in range(workers or 1)]


#: prometheus_client's multi-process directory (read by it when first imported).
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


@contextlib.contextmanager
def shared_metrics_dir() -> Iterator[Path]:
    """A multi-process metrics directory for this command and the processes it starts.

    ``up`` (its API and workers) and ``serve --workers N`` (its API processes) run several
    processes whose metrics one scrape must add up (`api.metrics`). A ``PROMETHEUS_MULTIPROC_DIR``
    already set is used as it is (whoever set it empties it between runs); otherwise a fresh
    directory is made for this run and removed at its end. Set before prometheus_client is
    imported here or in a child, which is when it reads the variable.
    """
    given = os.environ.get(METRICS_DIR_ENV)
    path = Path(given) if given else Path(tempfile.mkdtemp(prefix="kernelloop-metrics-"))
    path.mkdir(parents=True, exist_ok=True)
    os.environ[METRICS_DIR_ENV] = str(path)
    values = sys.modules.get("prometheus_client.values")
    if values is not None:  # imported already (a plugin, a test): metrics made from now on use the files
        values.ValueClass = values.get_value_class()  # type: ignore[attr-defined]
    try:
        yield path
    finally:
        if not given:
            os.environ.pop(METRICS_DIR_ENV, None)
            shutil.rmtree(path, ignore_errors=True)


