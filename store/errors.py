"""Exceptions the store raises. They mean misuse or a lost race, never a kernel's failure.

::

    StoreError
    ├── IllegalTransition   a job state move the state machine forbids
    ├── LeaseLost           a worker acted on a job it no longer holds
    └── NotFound            no row with that id
"""

from __future__ import annotations

__all__ = ["IllegalTransition", "LeaseLost", "NotFound", "StoreError"]


class StoreError(Exception):
    """Base of every exception raised by `store`."""


class IllegalTransition(StoreError):
    def __init__(self, current: str, target: str, why: str = "") -> None:
        self.current = current
        self.target = target
        self.why = why
        message = f"a job cannot move from {current!r} to {target!r}"
        super().__init__(f"{message}: {why}" if why else message)


class LeaseLost(StoreError):
    """The job is not running under this worker any more (reaped, cancelled or finished)."""

    def __init__(self, job_id: int, worker_id: str) -> None:
        self.job_id = job_id
        self.worker_id = worker_id
        super().__init__(f"worker {worker_id!r} does not hold the lease of job {job_id}")


class NotFound(StoreError, LookupError):
    def __init__(self, kind: str, ident: object) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"no {kind} with id {ident!r}")
