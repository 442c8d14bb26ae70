"""Issue 13, observation 4 (blame), at the evaluator: a failure of the problem's own code is
final — never retried as infrastructure, remembered, reported once — and a cancel reaches the
referee from any thread."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from agent.retry import InfraRetry
from harness import HarnessOptions, Referee, ReferenceFailed
from harness.evaluate import CANCELLED_MESSAGE
from problems import load_problem
from vocabulary.evaluation import Depth, Target
from vocabulary.verdict import ErrorKind, Stage, Status, Verdict
from worker.evaluator import RefereeEvaluator

PROBLEM_VERDICT = Verdict(status=Status.ERROR, stage=Stage.PROBLEM, error_kind=ErrorKind.PROBLEM,
                          message="the problem's code failed to run (problem:p, line 3): ValueError: no")


class FailingReferee:
    """A referee whose problem fails: a verdict, or ReferenceFailed from ``device_specs``."""

    target = Target.CPU

    def __init__(self) -> None:
        self.evaluations = 0
        self.starts = 0
        self.cancels = 0

    def evaluate(self, source: str, depth: Depth | str = Depth.BENCHMARK) -> Verdict:
        self.evaluations += 1
        return PROBLEM_VERDICT

    @property
    def device_specs(self) -> dict[str, Any]:
        self.starts += 1
        raise ReferenceFailed("the problem's code did not finish starting", "trace", ErrorKind.PROBLEM)

    def cancel(self) -> None:
        self.cancels += 1

    def close(self) -> None:
        pass


def _evaluator(referee: FailingReferee, tmp_path: Path, told: list[Verdict]) -> RefereeEvaluator:
    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"a problem failure must not be retried (slept {seconds} s)")

    return RefereeEvaluator(referee, cache_dir=tmp_path, device_key="cpu", retry=InfraRetry(delays_s=(2.0, 10.0)),
                            on_problem_failure=told.append, sleep=no_sleep)


def test_a_problem_verdict_is_not_retried_and_is_final(tmp_path: Path) -> None:
    referee, told = FailingReferee(), []
    evaluator = _evaluator(referee, tmp_path, told)
    try:
        first = evaluator.evaluate("class ModelNew: pass", Depth.BENCHMARK)
        again = evaluator.evaluate("class ModelNew: pass  # another", Depth.CORRECTNESS)
    finally:
        evaluator.close()
    assert first.error_kind is ErrorKind.PROBLEM and referee.evaluations == 1
    assert again.error_kind is ErrorKind.PROBLEM and again.depth == "correctness" and referee.evaluations == 1
    assert told == [first] and evaluator.infra_failures == 0


def test_a_problem_that_cannot_start_is_not_retried(tmp_path: Path) -> None:
    referee, told = FailingReferee(), []
    evaluator = _evaluator(referee, tmp_path, told)
    try:
        try:
            evaluator.device_specs  # noqa: B018 - the property starts the reference
        except ReferenceFailed as exc:
            assert exc.kind is ErrorKind.PROBLEM
        else:
            raise AssertionError("device_specs should have raised")
    finally:
        evaluator.close()
    assert referee.starts == 1 and len(told) == 1 and told[0].error_kind is ErrorKind.PROBLEM


def test_cancel_reaches_the_referee(tmp_path: Path) -> None:
    referee = FailingReferee()
    evaluator = _evaluator(referee, tmp_path, [])
    evaluator.cancel()
    evaluator.close()
    assert referee.cancels == 1


def test_a_descriptor_the_cancel_closed_under_an_evaluation_gives_a_cancelled_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel closes the sandboxes' descriptors from another thread; an OSError that reaches the
    Referee from one (EBADF) is the cancel's, not an infrastructure failure that the agent would be
    told of and a retry would re-run. Without a cancel the OSError is still raised (the worker
    reports it as ``infra``)."""
    options = HarnessOptions(cache_dir=tmp_path, prestart=False, compile_baseline=False)
    with Referee(load_problem("level1/softmax"), "cpu", options) as referee:
        def closed(source: str, depth: Depth) -> Verdict:
            raise OSError(errno.EBADF, "Bad file descriptor")

        def cancelled_then_closed(source: str, depth: Depth) -> Verdict:
            referee.cancel()  # in a job, from the thread that handles the cancel: the same state
            return closed(source, depth)

        monkeypatch.setattr(referee, "_evaluate", closed)
        with pytest.raises(OSError):
            referee.evaluate("x = 1")
        monkeypatch.setattr(referee, "_evaluate", cancelled_then_closed)
        verdict = referee.evaluate("x = 1")
    assert (verdict.status, verdict.error_kind, verdict.message) == (Status.ERROR, ErrorKind.CANCELLED,
                                                                      CANCELLED_MESSAGE)
