"""`harness.progress`: stage events are one started and one finished per stage, and a failing
listener never reaches the evaluation."""

from __future__ import annotations

import pytest

from harness.progress import StageReporter
from vocabulary.stages import StageEvent, StageName, StagePhase


def test_enter_finishes_the_stage_before_and_close_the_last() -> None:
    seen: list[StageEvent] = []
    stages = StageReporter(seen.append)
    stages.enter(StageName.LOAD)
    stages.enter(StageName.CORRECTNESS)
    stages.close()
    stages.close()  # nothing open: nothing more
    assert [(e.stage, e.phase) for e in seen] == [
        (StageName.LOAD, StagePhase.STARTED), (StageName.LOAD, StagePhase.FINISHED),
        (StageName.CORRECTNESS, StagePhase.STARTED), (StageName.CORRECTNESS, StagePhase.FINISHED)]
    assert all(e.seconds >= 0 for e in seen) and seen[0].seconds == 0


def test_a_span_finishes_even_when_its_block_raises() -> None:
    seen: list[StageEvent] = []
    with pytest.raises(RuntimeError), StageReporter(seen.append).span(StageName.BASELINES):
        raise RuntimeError("the reference died")
    assert [e.phase for e in seen] == [StagePhase.STARTED, StagePhase.FINISHED]


def test_a_listener_that_raises_is_ignored_and_none_is_fine() -> None:
    heard: list[StageEvent] = []

    def broken(event: StageEvent) -> None:
        heard.append(event)
        raise ConnectionError("the store is gone")

    reporter = StageReporter(broken)
    with reporter.span(StageName.COMPILE):  # the block runs, and so does the next event's emit
        reporter.enter(StageName.LOAD)
    reporter.close()
    assert [(e.stage, e.phase) for e in heard] == [
        (StageName.COMPILE, StagePhase.STARTED), (StageName.LOAD, StagePhase.STARTED),
        (StageName.COMPILE, StagePhase.FINISHED), (StageName.LOAD, StagePhase.FINISHED)]
    silent = StageReporter(None)
    silent.enter(StageName.TIMING)
    silent.close()  # nobody told, nothing raised


def test_events_are_plain_json_both_ways() -> None:
    event = StageEvent(StageName.HEADER_BUILD, StagePhase.FINISHED, 12.34567)
    assert event.to_dict() == {"stage": "header_build", "phase": "finished", "seconds": 12.346}
    assert StageEvent.from_dict(event.to_dict()) == StageEvent(StageName.HEADER_BUILD, StagePhase.FINISHED, 12.346)
