"""The lifecycles of a job and of a trajectory, and the one function that guards job moves.

::

    queued ──claim──▶ running ──▶ succeeded | failed | cancelled
      │                  │
      └──cancel──▶ cancelled
                         └──lease expired (reaper only)──▶ queued

`transition` is pure: it knows nothing about the database. The store's job functions call it
before every guarded ``UPDATE … WHERE state = :current``, so an illegal move raises before any
SQL runs, and a concurrent move makes the ``UPDATE`` match nothing.
"""

from __future__ import annotations

from enum import StrEnum

from store.errors import IllegalTransition
from vocabulary.evaluation import Target

__all__ = ["ALLOWED_TRANSITIONS", "JobKind", "JobState", "ModelRunState", "Target", "TrajectoryState", "transition"]


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

#: Every legal move. ``running → queued`` is in the table but `transition` only allows it for
#: lease recovery (see `transition`).
ALLOWED_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.QUEUED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def transition(current: JobState, target: JobState, *, lease_recovery: bool = False) -> JobState:
    """Check one move of a job's state machine.

    Args:
        current: the state the job is in.
        target: the state it should move to.
        lease_recovery: set only by the lease reaper; it is what makes ``running → queued`` legal
            (a worker must not hand a job back to the queue on its own).

    Returns:
        ``target``, when the move is legal.

    Raises:
        IllegalTransition: the move is not in `ALLOWED_TRANSITIONS`, or is ``running → queued``
            without ``lease_recovery``.
    """
    if target not in ALLOWED_TRANSITIONS[current]:
        raise IllegalTransition(current.value, target.value)
    if current is JobState.RUNNING and target is JobState.QUEUED and not lease_recovery:
        raise IllegalTransition(current.value, target.value, "only lease recovery re-queues a running job")
    return target


class JobKind(StrEnum):
    #: The LLM loop: one or more trajectories propose candidates.
    AGENT = "agent"
    #: ``POST /evaluations``: one candidate given by the user, no LLM.
    EVALUATION = "evaluation"


class TrajectoryState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    #: Ended with ``submit``.
    SUBMITTED = "submitted"
    #: Ran out of turns, tool calls or the job's budget without submitting.
    EXHAUSTED = "exhausted"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ModelRunState(StrEnum):
    """A model run: its region jobs run, then the whole patched model is verified and timed.

    ``running → applying → succeeded | failed``, and ``running → cancelled``; ``failed`` also
    straight from ``running`` when no region job produced a kernel.
    """

    RUNNING = "running"
    APPLYING = "applying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (ModelRunState.SUCCEEDED, ModelRunState.FAILED, ModelRunState.CANCELLED)
