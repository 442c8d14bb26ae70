"""The job state machine, as a pure function."""

from __future__ import annotations

import itertools

import pytest

from store import ALLOWED_TRANSITIONS, IllegalTransition, JobState, transition

LEGAL = {
    (JobState.QUEUED, JobState.RUNNING),
    (JobState.QUEUED, JobState.CANCELLED),
    (JobState.RUNNING, JobState.SUCCEEDED),
    (JobState.RUNNING, JobState.FAILED),
    (JobState.RUNNING, JobState.CANCELLED),
}


@pytest.mark.parametrize(("current", "target"), sorted(LEGAL))
def test_legal_moves(current: JobState, target: JobState) -> None:
    assert transition(current, target) is target


ILLEGAL = sorted(set(itertools.product(JobState, JobState)) - LEGAL - {(JobState.RUNNING, JobState.QUEUED)})


@pytest.mark.parametrize(("current", "target"), ILLEGAL)
def test_illegal_moves_raise(current: JobState, target: JobState) -> None:
    with pytest.raises(IllegalTransition) as info:
        transition(current, target)
    assert (info.value.current, info.value.target) == (current.value, target.value)
    assert repr(current.value) in str(info.value)


def test_illegal_moves_raise_even_for_lease_recovery() -> None:
    with pytest.raises(IllegalTransition):
        transition(JobState.SUCCEEDED, JobState.QUEUED, lease_recovery=True)
    with pytest.raises(IllegalTransition):
        transition(JobState.QUEUED, JobState.QUEUED, lease_recovery=True)


def test_running_back_to_queued_only_for_lease_recovery() -> None:
    with pytest.raises(IllegalTransition, match="lease recovery"):
        transition(JobState.RUNNING, JobState.QUEUED)
    assert transition(JobState.RUNNING, JobState.QUEUED, lease_recovery=True) is JobState.QUEUED


def test_terminal_states_have_no_exit() -> None:
    terminal = {s for s in JobState if s.is_terminal}
    assert terminal == {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    assert all(ALLOWED_TRANSITIONS[s] == frozenset() for s in terminal)
