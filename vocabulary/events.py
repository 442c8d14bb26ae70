"""A job's event types: one enum for every event of ``GET /jobs/{id}/events``.

Who appends each, and its payload (typed by `store.payloads` where the store keeps it):

- the store, in the same transaction as the change: ``state`` (`StatePayload`), ``cancel_requested``
  (`CancelRequestedPayload`), ``attempt`` (`AttemptPayload`);
- the worker (`worker.recorder`): ``trajectory`` (`TrajectoryPayload`), ``message``
  (`MessagePayload`), ``progress`` (`ProgressPayload`) and ``stage`` (the referee's stages,
  `harness.progress`);
- the API's stream only, never stored: ``end``, after the job's last event once it is final.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EventType"]


class EventType(StrEnum):
    """A job event's type: the store's ``job_events.type`` column and the stream's ``event:`` line."""

    STATE = "state"
    CANCEL_REQUESTED = "cancel_requested"
    ATTEMPT = "attempt"
    TRAJECTORY = "trajectory"
    MESSAGE = "message"
    PROGRESS = "progress"
    STAGE = "stage"
    END = "end"
