"""The metered loop (`harness.meter`), driven as the referee drives it, against a child process.

What a candidate's process can do to it, and what the trusted side sees: the loop's samples and
the trusted clock's figures agree for an honest forward; audited outputs are sealed copies of what
the call returned, on inputs the comparer recomputes bitwise (`call_inputs`); Python-level tampering
leaves the figures alone and is named; a loop rebuilt in Python that forges its samples is caught
by the trusted clock; a forward that returns a tensor subclass, switches TF32 on or raises ends
the run with the reason; frames out of turn are a broken protocol.
"""

from __future__ import annotations

import fcntl
import os
import statistics
from pathlib import Path

import pytest
import torch

from harness.channel import parse_message
from harness.meter.clock import Calibration, check_clock
from harness.meter.drive import CallPlan, MeteredRun, drive
from harness.meter.frames import DoneStatus
from harness.protocol.meter import MeterEnd
from harness.sandboxed.meter import call_inputs
from tests.support.meter import metered_child
from vocabulary.wire import Reader

PLAN = CallPlan(warmup_ms=5, min_warmup_calls=2, min_repeats=20, max_repeats=60, target_rel_stderr=0.0,
                max_time_s=5.0, sets=2, audits=3, audit_each_set=True)
#: A forward of a few milliseconds (a matmul chain): long enough for the trusted clock to tell.
SETUP = '''
torch.manual_seed(1)
weight = torch.randn(384, 384)
def fn(x):
    return torch.tanh(x @ weight) @ weight
sets = [[torch.randn(256, 384)] for _ in range(2)]
'''


def _run(setup: str, cache: Path, plan: CallPlan = PLAN, *, forged: bool = False) -> tuple[MeteredRun, MeterEnd]:
    with metered_child(setup, cache, forged=forged) as channel:
        run = drive(channel, plan, timeout_s=120)
        if run.protocol_error is not None:  # the referee asks nothing more of such a sandbox
            return run, MeterEnd(calls=0)
        end = MeterEnd.read(Reader(parse_message(channel.recv_frame(60).payload), "end"))
    return run, end


def test_an_honest_forward_is_timed_and_its_audited_outputs_are_what_it_returned(harness_cache: Path) -> None:
    run, end = _run(SETUP, harness_cache)
    try:
        assert run.failure is None and run.protocol_error is None
        assert end.calls == len(run.calls) and end.tampered == ()
        assert len(run.timed) >= PLAN.min_repeats
        # Every input set audited at least once, each a sealed memfd of the output's bytes.
        assert {a.call.input_set for a in run.audits} == {0, 1}
        torch.manual_seed(1)
        weight = torch.randn(384, 384)
        sets = [[torch.randn(256, 384)] for _ in range(2)]
        for audit in run.audits:
            assert fcntl.fcntl(audit.fd, 1034) & 0b1110 == 0b1110  # shrink, grow, write sealed
            data = os.pread(audit.fd, audit.nbytes, 0)
            got = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(256, 384)
            (x,) = call_inputs(sets[audit.call.input_set], audit.call.input_seed, torch.device("cpu"))
            assert not torch.equal(x, sets[audit.call.input_set][0])  # inputs differ per call...
            assert torch.equal(got, torch.tanh(x @ weight) @ weight)  # ...and are recomputed bitwise
            assert audit.description["tensors"] == [{"dtype": "float32", "shape": [256, 384], "device": "cpu"}]
        # The samples fit inside the trusted round trips, and agree with themselves.
        assert all(c.sample_ms <= c.trusted_ms for c in run.timed)
        calibration = Calibration.from_calls(run.timed)
        assert check_clock(run.timed, calibration).agrees
    finally:
        run.close()


def test_python_level_tampering_leaves_the_samples_alone_and_is_named(harness_cache: Path) -> None:
    # The prelude of issue 23: scale what the harness records, by patching what Python can reach.
    tamper = SETUP + '''
import harness.sandboxed.meter as meter_module
import harness.sandboxed.contract as contract
original = meter_module.Meter.run
def scaled(self, *args, **kwargs):
    return original(self, *args, **kwargs)
meter_module.Meter.run = scaled
contract.tf32_is_off = lambda: True
meter_module.call_inputs.__code__ = (lambda source, seed, device: list(source)).__code__
time.perf_counter = lambda: 0.0
'''
    honest, _ = _run(SETUP, harness_cache)
    patched, end = _run(tamper, harness_cache)
    honest.close()
    patched.close()
    assert patched.failure is None and patched.protocol_error is None
    assert {"harness.sandboxed.meter.Meter.run", "harness.sandboxed.contract.tf32_is_off",
            "harness.sandboxed.meter.call_inputs"} <= set(end.tampered)
    ratio = statistics.median(c.sample_ms for c in patched.timed) / statistics.median(c.sample_ms for c in honest.timed)
    assert 0.5 < ratio < 2.0, ratio  # the same work, measured the same way (a loaded host: loose)


#: A forward of ~15 ms (four 256x1024x1024 matmuls, one thread): what the mildest forgery here hides
#: (30 % at 0.7, ~4.5 ms a call) stays well above the clock's allowance for a forgery of every call
#: (half the loop's own cost per call), which a loaded host raises to a few milliseconds: the 0.7
#: forgery of a two-matmul forward (~7 ms) passed beside a full `make test` (2.1 ms hidden, 1.7 allowed).
HEAVY = '''
torch.manual_seed(1)
weight = torch.randn(1024, 1024)
def fn(x):
    for _ in range(2):
        x = torch.tanh(x @ weight) @ weight
    return x
sets = [[torch.randn(256, 1024)] for _ in range(2)]
'''


@pytest.mark.parametrize("scale", [0.3, 0.5, 0.7])
def test_a_forged_loop_is_caught_by_the_trusted_clock(harness_cache: Path, scale: float) -> None:
    honest, _ = _run(HEAVY, harness_cache)
    calibration = Calibration.from_calls(honest.timed)
    honest.close()
    forged, _ = _run(HEAVY + f"SCALE = {scale}\n", harness_cache, PLAN.__class__(**{**PLAN.__dict__, "audits": 0,
                                                                                    "audit_each_set": False}),
                     forged=True)
    check = check_clock(forged.timed, calibration)
    assert not check.agrees, check
    assert "more than the reported samples" in check.detail()


def test_a_tensor_subclass_output_ends_the_run(harness_cache: Path) -> None:
    run, _ = _run(SETUP + '''
class Lazy(torch.Tensor):
    pass
inner = fn
def fn(x):
    return inner(x).as_subclass(Lazy)
''', harness_cache)
    assert run.failure is not None and run.failure.status is DoneStatus.BAD_OUTPUT
    assert "Lazy" in run.failure.message and "plain type" in run.failure.message


def test_a_forward_that_switches_reduced_precision_on_ends_the_run(harness_cache: Path) -> None:
    run, _ = _run(SETUP + '''
inner = fn
def fn(x):
    torch.set_float32_matmul_precision("medium")
    return inner(x)
''', harness_cache)
    assert run.failure is not None and run.failure.status is DoneStatus.TF32


def test_a_forward_that_raises_ends_the_run_with_its_message(harness_cache: Path) -> None:
    run, _ = _run(SETUP + '''
def fn(x):
    raise SystemExit(0)
''', harness_cache)
    assert run.failure is not None and run.failure.status is DoneStatus.FORWARD_RAISED
    assert "SystemExit" in run.failure.message


def test_frames_out_of_turn_break_the_protocol(harness_cache: Path) -> None:
    # The forward answers for the loop: a DONE frame of its own, before the loop's.
    run, _ = _run(SETUP + '''
inner = fn
def fn(x):
    payload = struct.pack("=4sIQQd", b"KLDN", 0, 999, 0, 0.001)
    channel._sock.sendall(struct.pack(">I", len(payload)) + payload)
    return inner(x)
''', harness_cache)
    assert run.protocol_error is not None and "out of turn" in run.protocol_error
