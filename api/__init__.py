"""The HTTP API (FastAPI): jobs, evaluations, attempts, messages, live events, problems, health,
metrics. It reads and writes `store` and enqueues work; it never executes problem or candidate code.

    from api import create_app
    app = create_app(load_settings())

Owns: HTTP and its schemas (`api.schemas`: pydantic models, the OpenAPI contract), the dashboard,
submission batching, live event streams.
May import: `store`, `config`, `problems` (static checks only), `display` (the dashboard's number
formats), `vocabulary` (the shared value types: `Verdict`, `EventType`, `JsonObject` …; never
the harness itself), and of the agent only `agent.providers.scripted`'s script table (a scripted job without a
script is refused before it is queued); never `worker` (tests/test_architecture.py pins it).
In and out: JSON requests come in (pydantic models, `api.schemas`) and become store writes and
queued jobs; store rows go out as JSON responses (the stored JSON passed through typed as
`store.JsonField`), server-sent events and HTML pages.
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
