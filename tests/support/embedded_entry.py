"""The tests' embedded worker process: ``python -m tests.support.embedded_entry``.

`worker.embedded.EmbeddedWorker` with the tests' quick harness options and the fake agent;
settings come from ``KERNELLOOP_*`` like in production.
"""

from __future__ import annotations

import logging

from config import load_settings
from store import Target, make_engine, make_session_factory
from tests.support import fake_agent
from tests.support.worker import quick_options
from worker.embedded import EmbeddedWorker


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = load_settings()
    factory = make_session_factory(make_engine(settings.resolved_database_url))
    EmbeddedWorker(settings=settings, session_factory=factory, target=Target(settings.worker_target),
                   harness_options=quick_options(settings.resolved_cache_dir), run_agent=fake_agent.run_job).serve()


if __name__ == "__main__":
    main()
