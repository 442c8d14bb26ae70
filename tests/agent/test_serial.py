"""SerialEvaluator: compiles overlap; everything past them runs one at a time, on one thread."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from agent import SerialEvaluator
from tests.support.doubles import FakeCandidate, FakeEvaluator, make_verdict
from vocabulary.verdict import Verdict


class Tracking(FakeEvaluator):
    def __init__(self) -> None:
        super().__init__({"GOOD": FakeCandidate(), "BAD": FakeCandidate("compile_error")})
        self.active = {"compile": 0, "deep": 0}
        self.peak = {"compile": 0, "deep": 0}
        self.deep_threads: set[str] = set()
        self.guard = threading.Lock()

    def evaluate(self, source: str, depth: Any) -> Verdict:
        kind = "compile" if str(getattr(depth, "value", depth)) == "compile" else "deep"
        with self.guard:
            self.active[kind] += 1
            self.peak[kind] = max(self.peak[kind], self.active[kind])
            if kind == "deep":
                self.deep_threads.add(threading.current_thread().name)
        time.sleep(0.05)
        try:
            return super().evaluate(source, depth)
        finally:
            with self.guard:
                self.active[kind] -= 1


def test_deep_evaluations_are_serial_on_one_thread_and_compiles_overlap() -> None:
    inner = Tracking()
    held: list[str] = []

    @contextmanager
    def timing_lock():
        held.append("held")
        yield

    with SerialEvaluator(inner, timing_lock=timing_lock) as evaluator, ThreadPoolExecutor(6) as pool:
        depths = ["correctness", "benchmark", "profile", "benchmark", "correctness", "compile"]
        verdicts = list(pool.map(lambda d: evaluator.evaluate("GOOD", d), depths))
        assert evaluator.device_specs.name == "NVIDIA H200"
    assert [v.depth for v in verdicts] == depths and all(v.status.value == "pass" for v in verdicts)
    assert inner.peak["deep"] == 1 and inner.peak["compile"] > 1
    assert len(inner.deep_threads) == 1
    assert len(held) == 3  # benchmark, profile, benchmark


def test_a_failed_build_never_reaches_the_serial_stage() -> None:
    inner = Tracking()
    with SerialEvaluator(inner) as evaluator:
        verdict = evaluator.evaluate("BAD", "benchmark")
    assert verdict.stage.value == "compile" and verdict.depth == "benchmark"
    assert inner.calls == [("BAD", "compile")]
    assert verdict.to_dict()["compile"] == make_verdict("compile_error", "compile").to_dict()["compile"]
