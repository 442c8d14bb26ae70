"""Timing loops for candidates and baselines alike (runs inside stage processes).

CUDA: events around each call, queued in small batches between device-wide synchronisations,
an L2 flush (a write of > 2x the L2 size) before each timed call, warm-up, adaptive repeats until the standard error is
under `TimingOptions.target_rel_stderr` of the mean or the time cap is reached, input sets
rotated across calls (written into the same buffers, scaled so that no call repeats another's
inputs), and copies of sampled outputs handed back for re-checking. CPU: ``perf_counter``
around each call with the same statistics and no flush: a write of a 32 MB buffer before each
call woke torch's worker threads and left them parked, so a 26 µs op measured 58.8 ms (the loop
timed thread scheduling, not the kernel); like ``torch.utils.benchmark`` the CPU loop times warm
calls, within 5 % of its ``blocked_autorange`` from 20 µs to 100 ms on an idle machine
(benchmarks/cpu_timing_fidelity.py). On a loaded host (load average over the usable cores) or
with a wide spread, the timing carries a ``noisy`` warning.

The clock functions are bound when this module is imported, before any candidate code runs,
so a candidate that patches ``torch.cuda.Event`` or ``time.perf_counter`` does not reach them.
One that patches this module's bound names can; hardened timing (``TimingOptions.fixed_calls``:
a number of calls the trusted side dictates and times with its own clock) is how the trusted side
bounds what such a candidate reports (`harness.evaluate`, docs/integrity.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.contract import forward_seed
from harness.options import TimingOptions
from harness.verdict import Timing

__all__ = ["TimedRun", "call_scale", "clone_output", "load_inputs", "scaled_inputs", "time_callable"]

_perf_counter = time.perf_counter
_monotonic = time.monotonic
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_cuda_sync = torch.cuda.synchronize
_no_grad = torch.no_grad
_mul = torch.mul
_manual_seed = torch.manual_seed

#: Fallback when the device does not report its L2 size.
_DEFAULT_L2_BYTES = 64 * 1024 * 1024
#: Timed CUDA calls queued between two device synchronisations.
_CUDA_BATCH = 5
#: Warn when the run ends noisier than this (relative standard error).
NOISY_REL_STDERR = 0.02
#: Warn when a CPU timing's interquartile range exceeds this fraction of its median.
NOISY_CPU_SPREAD = 0.25


def _getloadavg() -> tuple[float, float, float]:
    return os.getloadavg()


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def cpu_load_warnings(timing: Timing) -> list[str]:
    """``noisy`` warnings of a CPU timing taken on a loaded host or with a wide spread: other work
    on the cores only ever slows calls down, so such a median overstates the kernel's time."""
    warnings = []
    try:
        load, cores = _getloadavg()[0], _usable_cores()
    except (OSError, AttributeError):  # a platform without them: no load figure
        load, cores = 0.0, 1
    if load > cores:
        warnings.append(f"noisy: the host was loaded (load average {load:.1f} on {cores} usable cores): "
                        "the CPU figures may be inflated")
    if timing.median_ms > 0 and timing.iqr_ms / timing.median_ms > NOISY_CPU_SPREAD:
        warnings.append(f"noisy: interquartile range {100 * timing.iqr_ms / timing.median_ms:.0f}% of the median")
    return warnings


class TimedRun:
    """Samples plus the outputs kept for re-checking: ``(call index, input set, output)``."""

    def __init__(self, timing: Timing, kept: list[tuple[int, int, Any]], wall_s: float) -> None:
        self.timing = timing
        self.kept = kept
        self.wall_s = wall_s


def _flush_buffer(device: torch.device) -> torch.Tensor:
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or _DEFAULT_L2_BYTES
    return torch.empty(int(2.5 * l2) // 4, dtype=torch.int32, device=device)


def call_scale(call: int) -> float:
    """The factor a timed call's floating inputs are scaled by: within 5 % of 1, never 1, and
    different for every call (an irrational rotation), so no call repeats an earlier one's inputs."""
    return 1.0 + 0.1 * (((call * 0.6180339887498949) % 1.0) - 0.5)


def load_inputs(buffers: Sequence[Any], source: Sequence[Any], call: int) -> None:
    """Write input set ``source`` into ``buffers`` as call ``call`` sees it (`call_scale`)."""
    scale = call_scale(call)
    for buf, src in zip(buffers, source, strict=True):
        if isinstance(buf, torch.Tensor):
            if buf.is_floating_point() or buf.is_complex():
                _mul(src, scale, out=buf)
            else:
                buf.copy_(src)


def scaled_inputs(source: Sequence[Any], call: int) -> list[Any]:
    """What `load_inputs` writes, as fresh tensors (the comparer recomputes re-checked calls)."""
    buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in source]
    load_inputs(buffers, source, call)
    return buffers


def clone_output(out: Any) -> Any:
    """A copy of a forward's output as it is now (stream-ordered on CUDA), for re-checking."""
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, (tuple, list)):
        return type(out)(clone_output(o) for o in out)
    return out


def time_callable(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], *, device: torch.device,
                  options: TimingOptions, keep_outputs: bool = False, first_call: int = 0,
                  seed_calls: bool = False) -> TimedRun:
    """Time ``fn(*inputs)`` over rotating input sets.

    The sets are written in turn into one set of call buffers before each call (outside the timed
    window), their floating tensors scaled by a factor unique to the call (`call_scale`): every
    call sees the same tensors with contents no earlier call saw. An output cached by input
    pointer or shape goes stale and fails the re-check; one memoised by input values never hits,
    so it is timed doing the work.

    Args:
        fn: the callable (a model's forward); called under ``torch.no_grad()``.
        input_sets: one or more argument lists, used in turn.
        device: where the work runs (cuda → events; cpu → perf_counter).
        options: warm-up, repeats, noise target, time cap, flush, re-check interval; with
            ``fixed_calls``, exactly ``min_warmup_calls`` warm-up calls and ``fixed_calls`` timed
            ones (hardened timing: the trusted side knows how many calls the loop made).
        keep_outputs: keep copies of outputs for re-checking: every ``options.recheck_every``-th
            call's, taking the input sets in turn (at most ``options.max_rechecks``), then one
            more call per input set after the timed calls.
        first_call: the id of the first call (its inputs' scale, `call_scale`): a second timing
            run in the same process continues the ids, so no call repeats an earlier run's inputs.
        seed_calls: seed torch's RNG before each call with `contract.forward_seed` of its id
            (outside the timed window), so a RANDOM problem's re-checked outputs can be recomputed.

    Returns:
        A `TimedRun` with raw samples (ms) and the kept outputs as ``(call, input set, output)``;
        the comparer recomputes the expected output of a call from `scaled_inputs`.
    """
    with _no_grad():  # entered once: per call, its cost is 5 % of a 20 µs op
        return _time_callable(fn, input_sets, device=device, options=options, keep_outputs=keep_outputs,
                              first_call=first_call, seed_calls=seed_calls)


def _time_callable(fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], *, device: torch.device,
                   options: TimingOptions, keep_outputs: bool, first_call: int, seed_calls: bool) -> TimedRun:
    cuda = device.type == "cuda"
    flush = _flush_buffer(device) if options.flush_cache and cuda else None
    sets = [list(s) for s in input_sets]
    buffers = [x.clone() if isinstance(x, torch.Tensor) else x for x in sets[0]]
    started = _perf_counter()
    #: Calls so far (warm-up, timed, re-checked): each one's inputs are scaled by its own factor.
    counter = max(0, first_call)

    def sync() -> None:
        if cuda:
            _cuda_sync(device)

    def load(i: int) -> int:
        nonlocal counter
        call_id = counter
        counter += 1
        load_inputs(buffers, sets[i % len(sets)], call_id)
        if seed_calls:
            _manual_seed(forward_seed(0, call_id))
        return call_id

    def call() -> Any:
        return fn(*buffers)

    # Warm-up: module loads, autotuning, allocator growth stay out of the samples. Hardened
    # (fixed_calls): exactly min_warmup_calls calls, so the trusted side knows how many ran.
    fixed = max(0, options.fixed_calls)
    warm_deadline = _perf_counter() + options.warmup_ms / 1e3
    calls = 0
    while calls < options.min_warmup_calls or (not fixed and _perf_counter() < warm_deadline):
        load(calls)
        call()
        calls += 1
        sync()
        if calls >= 10 * options.min_warmup_calls and _perf_counter() >= warm_deadline:
            break

    samples: list[float] = []
    kept: list[tuple[int, int, Any]] = []
    sampled_cap = max(0, options.max_rechecks - 1) if keep_outputs else 0
    next_keep, next_set = 0, 0
    i = 0
    out: Any = None
    per_batch = _CUDA_BATCH if cuda else 1
    while True:
        # CUDA: a batch of (flush, start, call, end) is queued before one device-wide sync, so
        # the flush keeps the GPU busy while the host launches the next call: the samples are
        # device time, as triton.testing.do_bench measures it. CPU: one call per sample.
        batch: list[tuple[Any, Any]] = []
        for _ in range(min(per_batch, fixed - i) if fixed else per_batch):
            call_id = load(i)
            # The previous output is let go before the call, as a caller that drops it would: held,
            # the allocator must find the call a fresh block (on CPU, page faults of a fresh mmap).
            out = None
            if flush is not None:
                flush.zero_()
            if cuda:
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                _event_record(start)
                out = call()
                _event_record(end)
                batch.append((start, end))
            else:
                t0 = _perf_counter()
                out = call()
                samples.append((_perf_counter() - t0) * 1e3)
            # Sampled re-checks take the input sets in turn; the copy is stream-ordered right
            # after the call, so work left running elsewhere is not in it.
            if len(kept) < sampled_cap and i >= next_keep and i % len(sets) == next_set:
                kept.append((call_id, i % len(sets), clone_output(out)))
                next_keep, next_set = i + options.recheck_every, (next_set + 1) % len(sets)
            i += 1
        if cuda:
            _cuda_sync(device)
            samples.extend(_event_elapsed(start, end) for start, end in batch)
        if fixed:
            if len(samples) >= fixed:
                break
            continue
        spent = sum(samples) / 1e3
        if len(samples) >= options.max_repeats or spent >= options.max_time_s:
            break
        # The noise check costs O(n); every few samples is enough.
        if len(samples) >= options.min_repeats and len(samples) % 5 == 0:
            timing = Timing.from_samples(samples, clock="")
            if timing.rel_stderr < options.target_rel_stderr:
                break
    if keep_outputs:
        # One more call per input set, indistinguishable from the timed ones, all re-checked.
        for _ in range(len(sets)):
            call_id = load(i)
            out = call()
            kept.append((call_id, i % len(sets), clone_output(out)))
            i += 1
        sync()
    warnings = []
    timing = Timing.from_samples(samples, clock="cuda_events" if cuda else "perf_counter")
    if timing.rel_stderr > NOISY_REL_STDERR:
        warnings.append(f"noisy: relative standard error {100 * timing.rel_stderr:.1f}% after {timing.n} runs")
    if not cuda:
        warnings += cpu_load_warnings(timing)
    if timing.median_ms < 0.05:
        warnings.append("under 50 us: launch overhead dominates; figures are indicative only")
    timing = Timing.from_samples(samples, clock=timing.clock, warnings=warnings)
    return TimedRun(timing, kept, _perf_counter() - started)
