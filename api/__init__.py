"""The HTTP API (FastAPI): jobs, evaluations, attempts, messages, live events, problems, health,
metrics. It reads and writes `store` and enqueues work; it never executes problem or candidate code.

    from api import create_app
    app = create_app(load_settings())
"""

from api.app import create_app
from api.dispatch import RUN_JOB_TASK, CeleryDispatcher, Dispatcher, DispatchError, NullDispatcher
from api.streaming import StreamOptions

__all__ = [
    "RUN_JOB_TASK",
    "CeleryDispatcher",
    "DispatchError",
    "Dispatcher",
    "NullDispatcher",
    "StreamOptions",
    "create_app",
]
