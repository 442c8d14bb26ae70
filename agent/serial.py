"""`SerialEvaluator`: a bare `harness.Referee` made safe for concurrent trajectories.

A Referee keeps one trusted reference process and talks to it over one pipe (expected outputs,
comparisons, baselines), so two evaluations past the compile stage must not interleave; the
reference process also dies with the thread that started it (``PR_SET_PDEATHSIG``), so it should
be started and used from one long-lived thread; and timing or profiling must have the device to
itself. Compiles need none of that: each runs in a process of its own with no GPU. So:

- ``compile`` depth runs in the caller's thread, concurrently;
- any deeper depth first builds in the caller's thread (``precompile``: several trajectories'
  builds overlap; the evaluation then finds its build in the cache), then runs on this wrapper's
  one worker thread, one at a time;
- ``benchmark`` and ``profile`` also hold ``timing_lock`` (e.g. a per-device file lock shared
  with other jobs on the same device).

The worker has its own thread-safe evaluator (``worker.evaluator.RefereeEvaluator``); this one is
for everything else (the CLI, tests, scripts). `run_job` wraps a bare Referee in it by itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from agent.protocols import Evaluator

if TYPE_CHECKING:
    from vocabulary.devices import DeviceSpecs
    from vocabulary.evaluation import Depth
    from vocabulary.verdict import Verdict

__all__ = ["SerialEvaluator"]

_TIMED = frozenset({"benchmark", "profile"})


class SerialEvaluator:
    """Serialises an `Evaluator`'s reference-using calls on one thread; compiles stay concurrent.

    Args:
        inner: the evaluator (a `harness.Referee`).
        timing_lock: a context-manager factory also held while timing or profiling.
        precompile: build in the caller's thread before a serialised deeper evaluation.
    """

    def __init__(self, inner: Evaluator, *, timing_lock: Callable[[], AbstractContextManager[Any]] | None = None,
                 precompile: bool = True) -> None:
        self.inner = inner
        self.precompile = precompile
        self._timing_lock = timing_lock
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="serial-evaluator")

    def _serial(self, source: str, depth: Depth | str, depth_name: str) -> Verdict:
        guard = self._timing_lock() if (self._timing_lock and depth_name in _TIMED) else contextlib.nullcontext()
        with guard:
            return self.inner.evaluate(source, depth)

    def evaluate(self, source: str, depth: Depth | str) -> Verdict:
        depth_name = str(getattr(depth, "value", depth))
        if depth_name == "compile":
            return self.inner.evaluate(source, depth)
        if self.precompile:
            built = self.inner.evaluate(source, "compile")
            if not built.compiled:
                return built.with_changes(depth=depth_name)
        return self._thread.submit(self._serial, source, depth, depth_name).result()

    @property
    def device_specs(self) -> DeviceSpecs:
        return self._thread.submit(lambda: self.inner.device_specs).result()

    def cancel(self) -> None:
        """Cancel the inner evaluator (terminal; called from any thread, while an evaluation runs)."""
        cancel = getattr(self.inner, "cancel", None)
        if cancel is not None:  # a harness.Referee from before Referee.cancel() runs its evaluation to the end
            cancel()

    def close(self) -> None:
        """Stop the worker thread (the inner evaluator is the caller's to close)."""
        self._thread.shutdown(wait=True)

    def __enter__(self) -> SerialEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
