"""The service's shared vocabulary: value types every layer names the same way, from the worker
through the store and the API to the command line's client.

Owns: the job event types (`EventType`: one enum for what the store, the worker and the API's
stream append or send, and what the client reads).
May import: the standard library only (a leaf: the client commands import it on a user's machine).
The referee's own contract (`harness.verdict`, `harness.wire`) is not here yet: moving it is the
rest of this package's job (docs/architecture.md).
"""

from __future__ import annotations

from vocabulary.events import EventType

__all__ = ["EventType"]
