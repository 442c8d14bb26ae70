"""The tests' Celery worker: ``celery -A tests.worker.celery_entry worker -Q cpu -c 1 --pool solo``.

The production app (`worker.main`) with the tests' quick harness options and the fake agent;
settings come from ``KERNELLOOP_*`` like in production.
"""

from __future__ import annotations

from config import load_settings
from tests.worker import fake_agent
from tests.worker.support import quick_options
from worker.wiring import create_worker_app

settings = load_settings()
app = create_worker_app(settings, harness_options=quick_options(settings.resolved_cache_dir),
                        run_agent=fake_agent.run_job)
