"""A metered loop in a child process, for the meter's own tests (tests/harness/test_meter.py).

`metered_child` starts ``python -c`` with one end of a socket pair: it binds `kl_meter` (as a sandbox
does, before the "candidate" code), runs ``SETUP`` (which defines ``fn`` and ``sets``, and may
tamper with anything), hands them to the loop, and answers `MeterEnd` when the loop stops. The
test drives it with `harness.meter.drive` like the referee does. ``FORGE`` children skip the loop
and answer the frames themselves, in Python: what a candidate that rebuilt the loop could send.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.channel import Channel
from harness.meter.build import meter_library
from tests.support.paths import REPO

__all__ = ["FORGED_LOOP", "metered_child"]

_PRELUDE = '''
import json, struct, sys, time
from pathlib import Path
import torch
from harness.sandboxed import contract
from harness.channel import Channel
from harness.sandboxed.meter import Meter
from harness.protocol.meter import MeterEnd
contract.tf32_off()
torch.manual_seed(0)
meter = Meter.load(Path(sys.argv[2]), torch.device("cpu"))
channel = Channel.from_fd(int(sys.argv[1]))
'''
_RUN = '''
calls = meter.run(channel, fn, sets, flush=False)
channel.send(MeterEnd(calls=calls, tampered=tuple(meter.tampered())))
'''
#: A loop written in Python that answers GO frames with ``sample * SCALE`` (``fn`` and ``sets``
#: from the setup): it loads each call's inputs and does the work as the real loop does (so it
#: would pass audits), holds its output instead of copying it, and forges what it reports.
FORGED_LOOP = '''
from harness.sandboxed.meter import call_inputs
GO = struct.Struct("=4sIQQQQII")
def read_exact(n):
    data = b""
    while len(data) < n:
        data += channel._sock.recv(n - len(data))
    return data
channel._sock.settimeout(None)
calls = 0
while True:
    (size,) = struct.unpack(">I", read_exact(4))
    _, flags, call, seed, fwd, nonce, index, _ = GO.unpack(read_exact(size))
    if flags & 2:
        break
    inputs = call_inputs(sets[index], seed, torch.device("cpu"))
    started = time.perf_counter()
    with torch.no_grad():
        held = fn(*inputs)
    sample = (time.perf_counter() - started) * 1e3 * SCALE
    payload = struct.pack("=4sIQQd", b"KLDN", 0, call, nonce, sample)
    channel._sock.sendall(struct.pack(">I", len(payload)) + payload)
    calls += 1
channel.send(MeterEnd(calls=calls))
'''


@contextmanager
def metered_child(setup: str, cache: Path, *, forged: bool = False) -> Iterator[Channel]:
    """The child's channel, ready for `harness.meter.drive`; the child is gone afterwards."""
    library = meter_library(cache / "builds")
    parent, child = socket.socketpair()
    code = _PRELUDE + textwrap.dedent(setup) + (FORGED_LOOP if forged else _RUN)
    process = subprocess.Popen([sys.executable, "-c", code, str(child.fileno()), str(library)],
                               pass_fds=(child.fileno(),), cwd=REPO)
    child.close()
    channel = Channel(parent)
    try:
        yield channel
    finally:
        channel.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
