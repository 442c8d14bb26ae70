"""The worker's start-up warm-up: precompiled torch headers built before any attempt needs them.

A header takes about a minute to build (16 cores) and longer on small hosts; built inside a job's
first attempt it is that attempt's cost. `start_header_warmup` builds the headers of every flag
set models commonly use (`harness.warm_headers`: a sandbox that runs trusted code only; on a host
of fewer than 4 cores the playbook's only) in a background thread while the worker starts
consuming; a job's first compile that comes meanwhile waits for the warm-up (a lock in the cache)
instead of building the same header again.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from harness import HarnessOptions, warm_headers
from vocabulary.evaluation import Target

__all__ = ["start_header_warmup"]

log = logging.getLogger(__name__)


#: Below this many cores a worker prepares only the playbook's header: each other one would take
#: the host's cores for minutes while its first attempts compile (2 cores: about 2-3 min each).
MIN_CORES_FOR_ALL_HEADERS = 4


def warms_prescribed_only() -> bool:
    """Whether a worker on this host warms the playbook's header alone (fewer than
    `MIN_CORES_FOR_ALL_HEADERS` cores), not every common flag set."""
    return (os.cpu_count() or 1) < MIN_CORES_FOR_ALL_HEADERS


def _warm(options: HarnessOptions, target: Target) -> None:
    started = time.monotonic()
    try:
        ready = warm_headers(target, options, prescribed_only=warms_prescribed_only())
    except Exception:  # a warm-up failure only costs compile speed, never the worker
        log.exception("precompiled header warm-up failed")
        return
    log.info("precompiled headers for %s %s in %.0f s", target.value, "ready" if ready else "NOT built",
             time.monotonic() - started)


def start_header_warmup(options: HarnessOptions, target: Target | str) -> threading.Thread:
    """Start the warm-up of ``target``'s precompiled headers in a daemon thread; returns it."""
    thread = threading.Thread(target=_warm, args=(options, Target(target)), name="header-warmup", daemon=True)
    thread.start()
    return thread
