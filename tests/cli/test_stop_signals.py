"""SIGINT and SIGTERM reach `kernelloop optimize` (and `serve`'s wait) whenever they come.

A Python signal handler runs in the main thread between two bytecodes. The handler of
`kernelloop optimize` used to call `threading.Event.set`, and its main loop waited on that event:
a signal that came while the loop held the event's lock left the handler waiting for that lock
for ever (a SIGTERM in a CI run: the command drew its progress for two minutes and never
cancelled). Here the waits run back to back, so most signals land inside them.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.paths import REPO

SIGNALS = 300

#: Zero-second waits back to back while another thread signals the process; it prints the count.
STRESS = f"""
import os, signal, threading, time
from cli.processes import StopSignals

with StopSignals().installed() as signals:
    def send():
        for _ in range({SIGNALS}):
            os.kill(os.getpid(), signal.SIGTERM if _ % 2 else signal.SIGINT)
            time.sleep(0.0005)
    sender = threading.Thread(target=send)
    sender.start()
    while sender.is_alive():
        signals.wait(0, beyond=signals.count)
    sender.join()
    assert signals.wait(0) and not signals.wait(0, beyond=signals.count)
    print(signals.count)
"""


def _run(code: str) -> str:
    """``code`` in a Python of its own (signals go to its main thread); its standard output."""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_signals_that_land_inside_the_waits_are_counted_and_never_hang() -> None:
    printed = _run(STRESS)
    assert 1 <= int(printed) <= SIGNALS  # signals pending at once are delivered as one


def test_a_signal_wakes_a_long_wait_at_once() -> None:
    code = """
import os, signal, threading, time
from cli.processes import StopSignals

with StopSignals().installed() as signals:
    threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGTERM)).start()
    started = time.monotonic()
    assert signals.wait(30)
    print(round(time.monotonic() - started, 2))
assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back as it was
"""
    assert float(_run(code)) < 5
