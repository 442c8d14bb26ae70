"""Timing loops for candidates and baselines alike (runs inside stage processes).

CUDA: events around each call, queued in small batches between device-wide synchronisations,
an L2 flush (a write of > 2x the L2 size) before each timed call, warm-up, adaptive repeats until the standard error is
under `TimingOptions.target_rel_stderr` of the mean or the time cap is reached, input sets
rotated across calls, and every k-th output handed back for re-checking. CPU: ``perf_counter``
with the same statistics and a cache flush.

The clock functions are bound when this module is imported, before any candidate code runs,
so a candidate that patches ``torch.cuda.Event`` or ``time.perf_counter`` does not reach them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.options import TimingOptions
from harness.verdict import Timing

__all__ = ["TimedRun", "time_callable"]

_perf_counter = time.perf_counter
_monotonic = time.monotonic
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_cuda_sync = torch.cuda.synchronize
_no_grad = torch.no_grad

#: CPU flush buffer: larger than the last-level cache of the CI and laptop machines we target.
_CPU_FLUSH_BYTES = 32 * 1024 * 1024
#: Fallback when the device does not report its L2 size.
_DEFAULT_L2_BYTES = 64 * 1024 * 1024
#: Timed CUDA calls queued between two device synchronisations.
_CUDA_BATCH = 5
#: Warn when the run ends noisier than this (relative standard error).
NOISY_REL_STDERR = 0.02


class TimedRun:
    """Samples plus the outputs kept for re-checking: ``(call index, input set, output)``."""

    def __init__(self, timing: Timing, kept: list[tuple[int, int, Any]], wall_s: float) -> None:
        self.timing = timing
        self.kept = kept
        self.wall_s = wall_s


def _flush_buffer(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or _DEFAULT_L2_BYTES
        return torch.empty(int(2.5 * l2) // 4, dtype=torch.int32, device=device)
    return torch.empty(_CPU_FLUSH_BYTES // 4, dtype=torch.int32)


def time_callable(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], *, device: torch.device,
                  options: TimingOptions, keep_outputs: bool = False) -> TimedRun:
    """Time ``fn(*inputs)`` over rotating input sets.

    Args:
        fn: the callable (a model's forward); called under ``torch.no_grad()``.
        input_sets: one or more argument lists, used in turn.
        device: where the work runs (cuda → events; cpu → perf_counter).
        options: warm-up, repeats, noise target, time cap, flush, re-check interval.
        keep_outputs: keep every ``options.recheck_every``-th output, at most
            ``options.max_rechecks`` including the last call's.

    Returns:
        A `TimedRun` with raw samples (ms) and the kept outputs.
    """
    cuda = device.type == "cuda"
    flush = _flush_buffer(device) if options.flush_cache else None
    sets = list(input_sets)
    started = _perf_counter()

    def sync() -> None:
        if cuda:
            _cuda_sync(device)

    def call(i: int) -> Any:
        with _no_grad():
            return fn(*sets[i % len(sets)])

    # Warm-up: module loads, autotuning, allocator growth stay out of the samples.
    warm_deadline = _perf_counter() + options.warmup_ms / 1e3
    calls = 0
    while calls < options.min_warmup_calls or _perf_counter() < warm_deadline:
        call(calls)
        calls += 1
        sync()
        if calls >= 10 * options.min_warmup_calls and _perf_counter() >= warm_deadline:
            break

    samples: list[float] = []
    kept: list[tuple[int, int, Any]] = []
    spent = 0.0
    i = 0
    out: Any = None
    while True:
        # CUDA: a batch of (flush, start, call, end) is queued before one device-wide sync, so
        # the flush keeps the GPU busy while the host launches the next call: the samples are
        # device time, as triton.testing.do_bench measures it. CPU: one call per sample.
        batch: list[tuple[Any, Any]] = []
        for _ in range(_CUDA_BATCH if cuda else 1):
            if flush is not None:
                flush.zero_() if cuda else flush.add_(1)
            if cuda:
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                _event_record(start)
                out = call(i)
                _event_record(end)
                batch.append((start, end))
            else:
                t0 = _perf_counter()
                out = call(i)
                samples.append((_perf_counter() - t0) * 1e3)
            if keep_outputs and i % options.recheck_every == 0 and len(kept) < options.max_rechecks - 1:
                kept.append((i, i % len(sets), out))
            i += 1
        if cuda:
            _cuda_sync(device)
            samples.extend(_event_elapsed(start, end) for start, end in batch)
        spent = sum(samples) / 1e3
        if len(samples) >= options.max_repeats or spent >= options.max_time_s:
            break
        # The noise check costs O(n); every few samples is enough.
        if len(samples) >= options.min_repeats and len(samples) % 5 == 0:
            timing = Timing.from_samples(samples, clock="")
            if timing.rel_stderr < options.target_rel_stderr:
                break
    if keep_outputs and (not kept or kept[-1][0] != i - 1):
        kept.append((i - 1, (i - 1) % len(sets), out))
    warnings = []
    timing = Timing.from_samples(samples, clock="cuda_events" if cuda else "perf_counter")
    if timing.rel_stderr > NOISY_REL_STDERR:
        warnings.append(f"noisy: relative standard error {100 * timing.rel_stderr:.1f}% after {timing.n} runs")
    if timing.median_ms < 0.05:
        warnings.append("under 50 us: launch overhead dominates; figures are indicative only")
    timing = Timing.from_samples(samples, clock=timing.clock, warnings=warnings)
    return TimedRun(timing, kept, _perf_counter() - started)
