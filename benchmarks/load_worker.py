"""The load run's worker processes, with the agent replaced by `benchmarks.load_double`.

``python -m benchmarks.load_worker embedded`` is ``python -m worker.embedded`` (what ``kernelloop
up`` starts), ``python -m benchmarks.load_worker celery`` is ``kernelloop worker --queue cpu``
(Celery, solo pool, concurrency 1): the same classes and options, only the ``agent`` argument
differs, and the Celery worker warms no header (nothing here compiles; the embedded one's warm-up is
in ``worker.embedded``'s entry point, not used here). Settings come from ``KERNELLOOP_*`` as in production.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from types import FrameType

from benchmarks import load_double
from config import load_settings
from store import Target, make_engine, make_session_factory
from worker.embedded import EmbeddedWorker
from worker.wiring import create_worker_app


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def embedded() -> None:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    settings = load_settings()
    engine = make_engine(settings.resolved_database_url)
    try:
        EmbeddedWorker(settings=settings, session_factory=make_session_factory(engine), target=Target.CPU,
                       run_agent=load_double.run_job, referee_factory=load_double.DoubleReferee).serve()
    finally:
        engine.dispose()


def celery(name: str) -> None:
    # The double compiles nothing: a worker's header warm-up would only take the CPU from the run
    # being measured (and build a header into the run's throwaway cache).
    settings = load_settings().model_copy(update={"warm_headers": False})
    app = create_worker_app(settings, target=Target.CPU, run_agent=load_double.run_job,
                            referee_factory=load_double.DoubleReferee)
    app.worker_main(["worker", "--queues", "cpu", "--concurrency", "1", "--pool", "solo", "--hostname",
                     f"{name}@%h", "--loglevel", "WARNING", "--without-gossip", "--without-mingle"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load_worker")
    parser.add_argument("kind", choices=["embedded", "celery"])
    parser.add_argument("--name", default="load", help="the Celery worker's node name")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.kind == "embedded":
        embedded()
    else:
        celery(args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
