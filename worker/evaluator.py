"""The agent's `Evaluator` over a `harness.Referee`: infra retries and the device's timing lock.

- **Infra errors are retried, never charged.** A verdict with ``error_kind == "infra"`` (or a
  `harness.ReferenceFailed` from starting the reference) is ours, not the candidate's: the
  reference process is restarted and the evaluation tried again as the one policy says
  (`agent.retry.InfraRetry`: two more times by default). Only then does the infra verdict come
  back (flagged ``infra``, which the agent neither feeds to the LLM nor counts against its budget).
  For agent jobs the agent's tool executor does the retrying (it records each try), so the runner
  passes ``NO_RETRY`` here.
- **One timing run per device.** ``benchmark`` and ``profile`` evaluations hold the device's lock
  (`worker.devicelock`). On ``cuda`` the candidate is compiled first, outside the lock (no GPU is
  used by a compile), so one job's compile overlaps another's timing; the timed evaluation then
  finds the build in the cache (the verdict's ``stage_seconds`` are both evaluations', the
  compile's included). On ``cpu`` the whole evaluation holds the lock: a compile on the same
  cores would disturb the other's timing. Every verdict's stages, kind and lane seconds go to the
  worker's metrics (`worker.metrics.observe_verdict`).
- **The problem's failures are final.** A verdict with ``error_kind == "problem"`` (the user's
  reference raised, hung or hit a limit) is never retried: every later evaluation would fail the
  same way. It is remembered (`problem_failure`) and reported through ``on_problem_failure``.
- **Cancel is immediate.** `cancel` kills the referee's sandboxes from the calling thread,
  so the evaluation in flight returns within seconds and releases the device lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from agent.retry import INFRA_RETRY, InfraRetry
from harness import ReferenceFailed, StageListener
from vocabulary.devices import DeviceSpecs
from vocabulary.evaluation import Depth, Target
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from worker import metrics
from worker.devicelock import device_lock

__all__ = ["RefereeEvaluator", "RefereeLike"]

log = logging.getLogger(__name__)

#: Depths whose figures need the device to themselves.
_TIMED = frozenset({Depth.BENCHMARK, Depth.PROFILE})
_T = TypeVar("_T")


class RefereeLike(Protocol):
    """What the evaluator needs of `harness.Referee` (a test seam)."""

    target: Target
    #: Told of each stage as it starts and finishes (`harness.progress`); the runner sets it.
    on_stage: StageListener | None

    def evaluate(self, source: str, depth: Depth | str = ...) -> Verdict: ...

    @property
    def device_specs(self) -> DeviceSpecs: ...

    def close(self) -> None: ...


class RefereeEvaluator:
    """Implements ``agent.Evaluator``: ``evaluate(source, depth) -> Verdict`` and ``device_specs``.

    Thread-safe: the agent's trajectories may call it concurrently. Everything that talks to the
    referee's reference process runs on one long-lived thread of its own, one call at a time
    (the reference's channel is a single conversation, and its sandbox dies with the thread that
    started it, so it must not be a trajectory's); compiles run in the caller's thread and
    overlap with it.

    Args:
        referee: the job's referee (its reference process stays alive across evaluations).
        cache_dir: where the device locks live (the harness cache, shared by the host's workers).
        device_key: the lock's name (`worker.devicelock.device_key`).
        retry: the infra-retry policy; ``NO_RETRY`` where the caller retries (the agent does,
            recording each try). Either way, an infra failure restarts the reference before the
            next evaluation.
        on_infra_failure: told of each infra failure that will be retried (the verdict, and how
            many tries failed so far), e.g. to show it in the job's events.
        on_problem_failure: told of the first failure of the problem's own code (its verdict),
            e.g. to stop the job.
        sleep: the pause (a test seam).
    """

    def __init__(
        self,
        referee: RefereeLike,
        *,
        cache_dir: Path,
        device_key: str,
        retry: InfraRetry = INFRA_RETRY,
        on_infra_failure: Callable[[Verdict, int], None] | None = None,
        on_problem_failure: Callable[[Verdict], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.referee = referee
        self._cache_dir = cache_dir
        self._device_key = device_key
        self._retry = retry
        self._on_infra_failure = on_infra_failure
        self._on_problem_failure = on_problem_failure
        self._sleep = sleep
        self._cancelled = threading.Event()
        #: The first verdict that blamed the problem's own code, if any.
        self.problem_failure: Verdict | None = None
        self._referee_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="referee")
        self._stats = threading.Lock()
        #: Seconds spent in evaluations that were not infra failures (what a job is charged).
        self.charged_seconds = 0.0
        #: Seconds waited for the device lock, all evaluations together.
        self.lock_wait_seconds = 0.0
        #: Evaluations (and reference starts) that failed for our reasons.
        self.infra_failures = 0

    # -- agent.Evaluator -------------------------------------------------------------------
    @property
    def device_specs(self) -> DeviceSpecs:
        """The device the reference runs on; starting the reference is retried like an evaluation.

        Raises:
            ReferenceFailed: the reference could not start after every retry.
        """
        for delay in self._retry.pauses():
            try:
                return self._on_referee_thread(lambda: self.referee.device_specs)
            except ReferenceFailed as exc:
                if exc.kind is ErrorKind.PROBLEM:
                    self._problem(Verdict(status=Status.ERROR, stage=Stage.PROBLEM, error_kind=ErrorKind.PROBLEM,
                                          message=str(exc), log=exc.details))
                    raise
                self._count(infra=1)
                self._on_referee_thread(self.referee.close)
                if delay is None or self._cancelled.is_set():
                    raise
                log.warning("the reference failed to start (%s); retrying in %.0f s", exc, delay)
                self._sleep(delay)
        raise AssertionError("unreachable")

    def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
        """Evaluate one candidate, retrying infra failures; failures of the candidate are values."""
        depth = Depth(depth)
        if self.problem_failure is not None:  # the same problem fails the same way: not again
            return self.problem_failure.with_changes(depth=depth.value)
        for delay in self._retry.pauses():
            started = time.monotonic()
            verdict = self._once(source, depth)
            self._observe(verdict, depth, time.monotonic() - started)
            if verdict.error_kind is ErrorKind.PROBLEM:
                self._problem(verdict)
                return verdict
            if verdict.error_kind is ErrorKind.CANCELLED:  # cut short by the job's stop: not charged
                return verdict
            if not self._retry.retryable(verdict):
                self._count(charged=time.monotonic() - started)
                return verdict
            self._count(infra=1)
            self._on_referee_thread(self.referee.close)  # a fresh reference process next time
            if delay is None or self._cancelled.is_set():
                return verdict
            log.warning("infra failure at %s (%s); retrying in %.0f s", verdict.stage, verdict.message, delay)
            if self._on_infra_failure is not None:
                self._on_infra_failure(verdict, self.infra_failures)
            self._sleep(delay)
        raise AssertionError("unreachable")

    def cancel(self) -> None:
        """Stop for good (any thread): the referee's sandboxes are killed now, so the evaluation in
        flight returns within seconds (releasing the device lock) and none is retried."""
        self._cancelled.set()
        cancel = getattr(self.referee, "cancel", None)
        if cancel is not None:
            cancel()

    def close(self) -> None:
        """Stop the reference process and the referee's thread."""
        try:
            self._on_referee_thread(self.referee.close)
        finally:
            self._referee_thread.shutdown(wait=True)

    # -- internals -------------------------------------------------------------------------
    def _problem(self, verdict: Verdict) -> None:
        first = self.problem_failure is None
        self.problem_failure = self.problem_failure or verdict
        if first and self._on_problem_failure is not None:
            self._on_problem_failure(verdict)

    def _on_referee_thread(self, fn: Callable[..., _T], *args: Any) -> _T:
        return self._referee_thread.submit(fn, *args).result()

    def _observe(self, verdict: Verdict, depth: Depth, seconds: float) -> None:
        """The worker's metrics of one evaluation (`worker.metrics`)."""
        target = self.referee.target.value
        metrics.EVALUATION_SECONDS.labels(target, depth.value, verdict.status.value).observe(seconds)
        metrics.observe_verdict(target, verdict)
        if verdict.error_kind is ErrorKind.INFRA:
            metrics.INFRA_FAILURES.labels(target).inc()
        elif self.referee.target is Target.CUDA:
            metrics.GPU_SECONDS.inc(seconds)

    def _built(self, verdict: Verdict) -> Verdict:
        """``verdict``, its build counted in the metrics if one ran (a cached build takes 0 s)."""
        built = verdict.compile
        if built is not None and built.seconds > 0:
            metrics.COMPILE_SECONDS.labels(self.referee.target.value, str(built.ok).lower()).observe(built.seconds)
        return verdict

    def _count(self, *, infra: int = 0, charged: float = 0.0, waited: float = 0.0) -> None:
        with self._stats:
            self.infra_failures += infra
            self.charged_seconds += charged
            self.lock_wait_seconds += waited

    def _once(self, source: str, depth: Depth) -> Verdict:
        try:
            if depth is Depth.COMPILE:
                return self._built(self.referee.evaluate(source, depth))
            compiled: Verdict | None = None
            if self.referee.target is Target.CUDA:
                # Compile here, with no GPU and no lock; the evaluation below reuses the build.
                compiled = self._built(self.referee.evaluate(source, Depth.COMPILE))
                if compiled.status is not Status.PASS:
                    return compiled.with_changes(depth=depth.value)
            if depth in _TIMED:
                verdict = self._built(self._on_referee_thread(self._timed, source, depth))
            else:
                verdict = self._built(self._on_referee_thread(self.referee.evaluate, source, depth))
            if compiled is None or not compiled.stage_seconds.items():
                return verdict
            # The attempt's stages are both evaluations' (the compile's seconds are in the first).
            return verdict.with_changes(stage_seconds=compiled.stage_seconds.plus(verdict.stage_seconds))
        except ReferenceFailed as exc:
            # Starting the reference failed outside an evaluation: the problem's code (final) or ours.
            message = str(exc) if exc.kind is ErrorKind.PROBLEM else f"the evaluation could not run: {exc}"
            return Verdict(status=Status.ERROR, stage=Stage.PROBLEM, error_kind=exc.kind, message=message,
                           depth=depth, log=exc.details)
        except OSError as exc:
            # The referee reports its own failures as verdicts; this escaped it (the disk is full):
            # ours, not the candidate's.
            return Verdict(status=Status.ERROR, stage=Stage.PROBLEM, error_kind=ErrorKind.INFRA,
                           message=f"the evaluation could not run: {exc}", depth=depth)

    def _timed(self, source: str, depth: Depth) -> Verdict:
        with device_lock(self._cache_dir, self._device_key) as waited:
            self._count(waited=waited)
            return self.referee.evaluate(source, depth)
