"""What an evaluation is asked for: the kind of device it runs on and how far it goes.

Standard library only: the service names these in requests, the store's columns and the CLI.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Depth", "Target"]


class Target(StrEnum):
    CUDA = "cuda"
    CPU = "cpu"


class Depth(StrEnum):
    """How far an evaluation goes (the agent's tools map onto these)."""

    #: Build the extensions only.
    COMPILE = "compile"
    #: Build, then the correctness trials and the integrity checks.
    CORRECTNESS = "correctness"
    #: Everything: correctness, integrity, timing against the baselines, roofline.
    BENCHMARK = "benchmark"
    #: Correctness, then a per-kernel time table from the torch profiler instead of timing.
    PROFILE = "profile"
