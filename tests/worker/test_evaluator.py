"""`RefereeEvaluator` with a scripted referee: retries, the device lock, compiles outside it, threads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.retry import NO_RETRY, InfraRetry
from harness import ReferenceFailed
from tests.support.paths import REPO
from vocabulary.devices import DeviceSpecs
from vocabulary.evaluation import Depth, Target
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from worker.devicelock import device_key, device_lock
from worker.evaluator import RefereeEvaluator

PASSED = Verdict(status=Status.PASS, stage=Stage.DONE)
COMPILED = Verdict(status=Status.PASS, stage=Stage.COMPILE, depth="compile")
COMPILE_ERROR = Verdict(status=Status.ERROR, stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE, depth="compile")
INFRA = Verdict(status=Status.ERROR, stage=Stage.PROBLEM, error_kind=ErrorKind.INFRA, message="busy")


class Referee:
    """Answers by depth; records the thread and whether the device lock was held for each call."""

    def __init__(self, target: Target, answers: dict[str, list[Verdict]], lock_path: Path | None = None) -> None:
        self.target = target
        self.answers = answers
        self.lock_path = lock_path
        self.calls: list[tuple[str, str, bool]] = []
        self.closed = 0
        self.specs_failures = 0

    def _locked(self) -> bool:
        if self.lock_path is None or not self.lock_path.exists():
            return False
        # Held by someone if a non-blocking attempt from a fresh descriptor fails.
        import fcntl

        fd = os.open(self.lock_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
        depth = Depth(depth).value
        self.calls.append((depth, threading.current_thread().name, self._locked()))
        return self.answers[depth].pop(0)

    @property
    def device_specs(self) -> DeviceSpecs:
        if self.specs_failures:
            self.specs_failures -= 1
            raise ReferenceFailed("the reference process failed to start")
        # The name says which thread asked (the reference's own, not the caller's).
        return DeviceSpecs(target="cpu", name=threading.current_thread().name)

    def close(self) -> None:
        self.closed += 1


def _evaluator(referee: Referee, cache: Path, **kw: Any) -> RefereeEvaluator:
    kw.setdefault("retry", InfraRetry(delays_s=(0.0, 0.0)))
    return RefereeEvaluator(referee, cache_dir=cache, device_key="gpu-0", **kw)


def test_cuda_compiles_outside_the_lock_then_times_under_it(tmp_path: Path) -> None:
    referee = Referee(Target.CUDA, {"compile": [COMPILED, COMPILE_ERROR], "benchmark": [PASSED]},
                      lock_path=tmp_path / "locks" / "gpu-0.lock")
    evaluator = _evaluator(referee, tmp_path)
    assert evaluator.evaluate("src", "benchmark") is PASSED
    (compile_depth, compile_thread, compile_locked), (timed_depth, timed_thread, timed_locked) = referee.calls
    assert (compile_depth, compile_locked) == ("compile", False) and compile_thread == "MainThread"
    assert (timed_depth, timed_locked) == ("benchmark", True) and timed_thread.startswith("referee")
    # A compile error comes back at the depth asked for, without taking the lock.
    failed = evaluator.evaluate("bad", Depth.BENCHMARK)
    assert failed.stage is Stage.COMPILE and failed.depth == "benchmark" and len(referee.calls) == 3
    evaluator.close()
    assert referee.closed == 1


def test_cpu_evaluations_hold_the_lock_only_when_timed(tmp_path: Path) -> None:
    referee = Referee(Target.CPU, {"correctness": [PASSED], "profile": [PASSED], "compile": [COMPILED]},
                      lock_path=tmp_path / "locks" / "gpu-0.lock")
    evaluator = _evaluator(referee, tmp_path)
    evaluator.evaluate("s", "correctness")
    evaluator.evaluate("s", "profile")
    evaluator.evaluate("s", "compile")
    assert [(d, locked) for d, _, locked in referee.calls] == [("correctness", False), ("profile", True),
                                                              ("compile", False)]


def test_infra_failures_restart_the_reference_and_are_not_charged(tmp_path: Path) -> None:
    referee = Referee(Target.CPU, {"benchmark": [INFRA, INFRA, INFRA, INFRA, PASSED]})
    told: list[int] = []
    evaluator = _evaluator(referee, tmp_path, on_infra_failure=lambda verdict, tries: told.append(tries))
    assert evaluator.evaluate("s").error_kind is ErrorKind.INFRA  # three tries, all infra
    assert evaluator.infra_failures == 3 and referee.closed == 3 and told == [1, 2]
    assert evaluator.charged_seconds == 0
    assert evaluator.evaluate("s") is PASSED  # one more infra, then a pass
    assert evaluator.infra_failures == 4 and evaluator.charged_seconds > 0

    no_retries = _evaluator(Referee(Target.CPU, {"benchmark": [INFRA]}), tmp_path, retry=NO_RETRY)
    assert no_retries.evaluate("s").error_kind is ErrorKind.INFRA


def test_device_specs_retry_a_reference_that_failed_to_start(tmp_path: Path) -> None:
    referee = Referee(Target.CPU, {})
    referee.specs_failures = 2
    specs = _evaluator(referee, tmp_path).device_specs
    assert specs.name.startswith("referee") and referee.closed == 2
    referee.specs_failures = 3
    with pytest.raises(ReferenceFailed):
        _ = _evaluator(referee, tmp_path).device_specs


def test_escaping_errors_become_infra_verdicts(tmp_path: Path) -> None:
    class Broken(Referee):
        def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
            raise OSError(28, "No space left on device")

    verdict = _evaluator(Broken(Target.CPU, {}), tmp_path, retry=NO_RETRY).evaluate("s", "correctness")
    assert verdict.error_kind is ErrorKind.INFRA and "No space left" in verdict.message
    assert verdict.depth == "correctness"


def test_concurrent_callers_compile_while_another_is_timed(tmp_path: Path) -> None:
    release = threading.Event()
    started_timing = threading.Event()

    class Slow(Referee):
        def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
            if Depth(depth) is Depth.BENCHMARK and source == "slow":
                started_timing.set()
                assert release.wait(5)
            return super().evaluate(source, depth)

    referee = Slow(Target.CUDA, {"compile": [COMPILED, COMPILED], "benchmark": [PASSED, PASSED]},
                   lock_path=tmp_path / "locks" / "gpu-0.lock")
    evaluator = _evaluator(referee, tmp_path)
    first = threading.Thread(target=evaluator.evaluate, args=("slow", "benchmark"), name="trajectory-0")
    first.start()
    assert started_timing.wait(5)
    # While trajectory 0 is being timed, trajectory 1's compile goes ahead in its own thread.
    second = threading.Thread(target=evaluator.evaluate, args=("fast", "benchmark"), name="trajectory-1")
    second.start()
    deadline = time.monotonic() + 5
    while len(referee.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert referee.calls == [("compile", "trajectory-0", False), ("compile", "trajectory-1", True)]
    release.set()
    first.join(5)
    second.join(5)
    assert [(c[0], c[1].startswith("referee"), c[2]) for c in referee.calls[2:]] == [("benchmark", True, True)] * 2


def test_device_keys() -> None:
    assert device_key("cpu", "0") == "cpu"
    assert device_key("cuda", "1") == "gpu-1"
    assert device_key("cuda", None) == "gpu-all"
    assert device_key("cuda", "GPU-8f1c/../x") == "gpu-GPU-8f1c_.._x"


def test_the_device_lock_serialises_processes_and_dies_with_its_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from worker.devicelock import device_lock\n"
         "with device_lock(Path(sys.argv[1]), 'gpu-0'):\n    print('held', flush=True); time.sleep(60)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        got = threading.Event()

        def take() -> None:
            with device_lock(tmp_path, "gpu-0"):
                got.set()

        waiter = threading.Thread(target=take)
        waiter.start()
        assert not got.wait(0.5)  # the other process holds it
        os.kill(holder.pid, signal.SIGKILL)
        assert got.wait(5)  # released by the kernel when its holder died
        waiter.join()
        with device_lock(tmp_path, "gpu-1") as waited:  # another device: no wait
            assert waited < 0.5
    finally:
        holder.kill()
        holder.wait()
