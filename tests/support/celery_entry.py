"""The tests' Celery worker: ``celery -A tests.support.celery_entry worker -Q cpu -c 1 --pool solo``.

The production app (`worker.main`) with the tests' quick harness options and the fake agent;
settings come from ``KERNELLOOP_*`` like in production.
"""

from __future__ import annotations

from config import load_settings
from tests.support import fake_agent
from tests.support.worker import quick_options
from worker.wiring import create_worker_app

settings = load_settings()
app = create_worker_app(settings, harness_options=quick_options(settings.resolved_cache_dir),
                        run_agent=fake_agent.run_job)
