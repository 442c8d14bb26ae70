"""The adversarial suite's referee options (tests/harness/integrity): one place, since a test of the
suite builds them again in a fresh interpreter (``python -c``, to put a canary in its environment)."""

from __future__ import annotations

from pathlib import Path

from harness import HarnessOptions, Timeouts, TimingOptions

#: Quick timing: enough calls for rotation, sampled re-checks and the tail calls to matter.
QUICK_TIMING = TimingOptions(warmup_ms=5, min_repeats=10, max_repeats=40, max_time_s=0.2, input_sets=2,
                             recheck_every=5)
#: Small enough that allocating past it takes a second, large enough for torch and a compile.
MEMORY_LIMIT_MB = 3072


def make_options(cache: Path, **changes: object) -> HarnessOptions:
    base = HarnessOptions(
        cache_dir=cache, secret_seed=20261130, trials=2, compile_baseline=False, timing=QUICK_TIMING,
        timeouts=Timeouts(trial_s=8.0, load_s=60.0, timing_s=60.0, compile_s=400.0),
        memory_limit_mb=MEMORY_LIMIT_MB,
    )
    return base.replace(**changes)
