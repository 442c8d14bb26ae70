"""The Celery worker process's entry point (settings from ``KERNELLOOP_*``)::

    CUDA_VISIBLE_DEVICES=0 KERNELLOOP_WORKER_TARGET=cuda \
        celery -A worker.main worker -Q gpu-h200 -c 1 --pool solo

``kernelloop worker`` does the same from the CLI. Importing this module builds the app; nothing
else should import it.
"""

from __future__ import annotations

from config import load_settings
from worker.wiring import create_worker_app

app = create_worker_app(load_settings())
