"""The worker's start-up warm-up: precompiled torch headers built before any attempt needs them.

A header takes about a minute to build (16 cores) and longer on small hosts; built inside a job's
first attempt it is that attempt's cost. `start_header_warmup` builds the headers of every flag
set models commonly use (`harness.warm_headers`: a stage that runs trusted code only) in a
background thread while the worker starts consuming; a job's first compile that comes meanwhile
waits for the warm-up (a lock in the cache) instead of building the same header again.
"""

from __future__ import annotations

import logging
import threading
import time

from harness import HarnessOptions, Target, warm_headers

__all__ = ["start_header_warmup"]

log = logging.getLogger(__name__)


def _warm(options: HarnessOptions, target: Target) -> None:
    started = time.monotonic()
    try:
        ready = warm_headers(target, options)
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
