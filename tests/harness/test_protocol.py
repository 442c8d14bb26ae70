"""The sandbox protocol (pure): every message round-trips through JSON, and a malformed reply is a
`WireError` naming what is wrong, where it enters."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import pytest

from harness.buildcache.records import BuildAnswer, BuildRecord, UnitRecord
from harness.channel import Channel, ChannelClosed
from harness.meter.frames import AuditFrame, DoneFrame, DoneStatus, GoFlags, go_frame, read_reply_frame
from harness.protocol import Exit, Op, OpFailed, Ready, StartFailed, op_of, read_reply
from harness.protocol.admission import (
    AdmissionCheck,
    AdmissionReply,
    AdmitRequest,
    Footprint,
    Measured,
    MeasureReply,
    MeasureRequest,
)
from harness.protocol.build import BuilderBuild, CompileReply, CompileRequest, Delegation, HeaderFlags, HeaderMode
from harness.protocol.candidate import (
    CandidateLoad,
    Loaded,
    ProfileReply,
    ProfileRequest,
    TimeRequest,
    TrialReply,
    TrialRequest,
)
from harness.protocol.meter import CallInputs, MeterEnd, Metering
from harness.protocol.reference import (
    Compared,
    CompareItem,
    CompareReply,
    CompareRequest,
    MeterRequest,
    ReferenceEnvironment,
    ReferenceInfo,
    ReferenceStart,
    Timed,
)
from harness.seeds import plan_trials
from problems import load_problem
from vocabulary.builds import ExtensionBuild, HeaderUse, KernelInfo
from vocabulary.devices import DeviceSpecs
from vocabulary.evaluation import Target
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import ProfileRow
from vocabulary.wire import JsonObject, WireError

PROBLEM = load_problem("level2/conv_tanh_scale_bias_maxpool")
TRIALS = tuple(plan_trials(7, trials=2, input_variants=True, extra_shapes=[{"batch_size": 4}]))
OUTPUT: JsonObject = {"kind": "file", "name": "trial-0.bin", "tensors": [{"dtype": "float32", "shape": [2, 3],
                                                                        "device": "cpu"}], "single": True}


def wire(message: object) -> JsonObject:
    """What the other side reads: the message's JSON through a real encode and decode."""
    data = json.loads(json.dumps(message.to_dict()))  # type: ignore[attr-defined]
    assert isinstance(data, dict)
    return data


REQUESTS = [
    ReferenceStart(problem=PROBLEM, target=Target.CPU, trials=TRIALS, init_seed=1, weights_seed=2, budget_bytes=3,
                   meter_path=Path("/r/kl_meter.so")),
    MeterRequest(timed=Timed.COMPILED, sets=(0, 1), flush=True),
    CompareRequest(items=(CompareItem(index=0, output=OUTPUT),
                          CompareItem(index=1, output=None, call=CallInputs(input_seed=7, forward_seed=8))),
                   directory=Path("/tmp/run"), atol=None, rtol=1e-3),
    CandidateLoad(workdir=Path("/w"), problem=PROBLEM, target=Target.CUDA, candidate_path=Path("/w/c.py"),
                  builds_dir=Path("/w/builds"), meter_path=Path("/w/kl_meter.so"), arch_list="9.0a",
                  transport="file", init_seed=1, weights_seed=2, trials=TRIALS),
    TrialRequest(index=2, noop=True, record_ops=False),
    TimeRequest(sets=(0, 1), flush=False),
    CompileRequest(candidate_path=Path("/r/candidate.py"), pch=HeaderMode.USE, builds_dir=Path("/b"),
                   staging_dir=Path("/s"), arch_list="9.0a", max_jobs=2, delegate=True),
    CompileRequest(candidate_path=None, pch=HeaderMode.BUILD, builds_dir=Path("/b"), staging_dir=Path("/s"),
                   arch_list="9.0a", max_jobs=2, warmup=(HeaderFlags(extra_cflags=("-O3",), cuda=False),)),
    BuilderBuild(request={"name": "ext", "cpp_sources": ["x"], "cuda_sources": [], "functions": None, "kwargs": {}},
                 builds_dir=Path("/b"), staging_dir=Path("/s"), arch_list="9.0a", max_jobs=2, pch=True),
    AdmitRequest(problem=PROBLEM, target=Target.CPU, trials=TRIALS, init_seed=1, weights_seed=2, other_weights_seed=3,
                 budget_bytes=4),
    MeasureRequest(problem=PROBLEM, overrides=({"batch_size": 8}, {})),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_a_request_reads_back_as_it_was_sent(request_: object) -> None:
    raw = wire(request_)
    assert op_of(raw) is type(request_).op  # type: ignore[attr-defined]
    assert type(request_).from_dict(raw) == request_  # type: ignore[attr-defined]


def test_replies_read_back_as_they_were_sent() -> None:
    specs = DeviceSpecs(target="cpu", name="x86_64", peak_flops={"fp32": 1e11}, measured_bandwidth=1e10, cores=2)
    info = ReferenceInfo(specs=specs, flops=1e9, min_bytes=1e6, sol_ms=0.1, output_dtype="float32",
                         environment=ReferenceEnvironment(torch="2.13.0", python="3.11.7", device="x86_64",
                                                          cpu_threads=2))
    assert ReferenceInfo.from_start_reply(wire(info)) == info
    failed = StartFailed(message="the reference problem failed to run", errors="Traceback")
    assert ReferenceInfo.from_start_reply(wire(failed)) == failed
    assert Loaded.from_reply(wire(Loaded(extensions=("kl_ext",)))) == Loaded(extensions=("kl_ext",))
    assert Loaded.from_reply(wire(failed)) == failed
    timing = Timing.from_samples([1.0, 2.0], clock="perf_counter")
    baselines = Baselines(eager=timing, torch_compile=None, notes=("off",))
    assert Metering.is_metering(wire(Metering())) and not Metering.is_metering(wire(failed))
    replies: list[tuple[object, object]] = [
        (MeterEnd(calls=12, flags=("background_threads",), tampered=("harness.sandboxed.contract.tf32_is_off",)),
         MeterEnd.read),
        (CompareReply(results=(Compared(passed=False, max_abs_err=None, mean_abs_err=None, mismatch_frac=1.0,
                                        message="shape"),)), CompareReply.read),
        (TrialReply(output=OUTPUT, flags=("tf32_enabled",), ops=("addmm", "view"), tampered=("x.y",)),
         TrialReply.read),
        (TrialReply(output={"kind": "invalid", "type": "int"}), TrialReply.read),
        (ProfileReply(kernels=(ProfileRow(name="k", calls=1, ms_per_forward=0.5),)), ProfileReply.read),
    ]
    for reply, read in replies:
        assert read_reply(wire(reply), read, "the reply") == reply  # type: ignore[arg-type]
    assert read_reply(wire(baselines), lambda r: Baselines.from_dict(r.data), "the baselines") == baselines
    assert read_reply(wire(OpFailed(error="boom")), TrialReply.read, "the reply") == OpFailed(error="boom")


def test_compile_and_build_replies_read_back() -> None:
    ext = ExtensionBuild(name="kl_ext", key="k" * 24, cached=False, seconds=3.0, via="builder",
                         pch=HeaderUse(status="used", key="p" * 24, seconds=0.0, flags=("-O1",)))
    reply = CompileReply(ok=False, seconds=3.0, errors="main.cpp:1: error", message="extension failed",
                         extensions=(ext,), kernels=(KernelInfo(kernel="k", registers=32),))
    assert CompileReply.from_dict(wire(reply)) == reply
    record = BuildRecord(name="kl_ext", key="k" * 24, cached=False, seconds=3.0, via="builder",
                         objects=[UnitRecord(source="main.cpp", object_file="main.o", key="o" * 24, rule="compile",
                                             seconds=2.5, kept="stored")], kernels=())
    answer = BuildAnswer(ok=True, key="k" * 24, record=record, seconds=3.1)
    assert BuildAnswer.from_dict(wire(answer)) == answer
    assert record.to_extension().units is not None and record.to_extension().units[0].kept == "stored"
    assert Delegation.parse(wire(Delegation(request={"name": "x"}))) == Delegation(request={"name": "x"})
    # A delegation whose request is not an object: the builder is never asked ("malformed build request").
    assert Delegation.parse({"op": "delegate", "request": [1, 2]}) == Delegation(request=None)
    assert Delegation.parse(wire(reply)) is None  # the compile's reply, not a delegation


def test_admission_replies_read_back() -> None:
    reply = AdmissionReply(checks=(AdmissionCheck("finite", True, "outputs are finite"),), forward_ms=1.5,
                           output_shapes=((2, 3),), output_dtypes=("float32",))
    assert AdmissionReply.from_reply(wire(reply)) == reply
    measured = MeasureReply(footprints=(Measured(footprint=Footprint(1, 2, None)), Measured(footprint=None,
                                                                                             error="meta")))
    assert MeasureReply.from_reply(wire(measured)) == measured


@pytest.mark.parametrize(("reply", "field"), [
    ({"calls": "12"}, "calls"),
    ({}, "calls"),
    ({"calls": 12, "flags": "tf32_enabled"}, "flags"),
    ({"calls": 12, "tampered": [1]}, "tampered"),
])
def test_a_malformed_end_of_the_timing_loop_is_a_wire_error_naming_the_field(reply: JsonObject, field: str) -> None:
    with pytest.raises(WireError, match=field):
        read_reply(reply, MeterEnd.read, "the timing loop's end")


def test_the_loops_frames() -> None:
    go = go_frame(GoFlags.SEED_FORWARD, call=3, input_seed=4, forward_seed=5, nonce=6, input_set=1)
    assert len(go) == 48 and go[:4] == b"KLGO"
    done = struct.pack("=4sIQQd", b"KLDN", 1, 3, 6, 2.5) + b"forward raised ValueError"
    assert read_reply_frame(done) == DoneFrame(DoneStatus.FORWARD_RAISED, 3, 6, 2.5, "forward raised ValueError")
    audit = struct.pack("=4sIQQ", b"KLAU", 0, 3, 16) + b'{"single": true, "tensors": []}'
    assert read_reply_frame(audit) == AuditFrame(3, 16, {"single": True, "tensors": []})
    for garbage in (b"KLDN", struct.pack("=4sIQQd", b"KLDN", 77, 3, 6, 1.0), b"KLAU" + b"\0" * 20 + b"[1]",
                    b'{"calls": 1}', go):
        with pytest.raises(WireError):
            read_reply_frame(garbage)


@pytest.mark.parametrize(("raw", "read"), [
    ({"output": OUTPUT, "ops": "addmm"}, TrialReply.read),
    ({"output": OUTPUT, "flags": [1, 2]}, TrialReply.read),
    ({"kernels": [{"calls": 1}]}, ProfileReply.read),
    ({"kernels": "none"}, ProfileReply.read),
])
def test_a_malformed_candidate_reply_is_a_wire_error(raw: JsonObject, read: object) -> None:
    with pytest.raises(WireError):
        read_reply(raw, read, "the reply")  # type: ignore[arg-type]


def test_a_malformed_load_or_compile_reply_is_a_wire_error() -> None:
    with pytest.raises(WireError):
        Loaded.from_reply({"ok": True, "extensions": "kl_ext"})
    with pytest.raises(WireError):
        Loaded.from_reply({"ok": "yes"})
    with pytest.raises(WireError, match="lacks 'key'"):
        CompileReply.from_dict({"ok": True, "extensions": [{"name": "x"}]})
    with pytest.raises(WireError, match="ok"):
        CompileReply.from_dict({"seconds": 1.0})


def test_ops_and_the_sandbox_messages() -> None:
    assert op_of({"op": "trial"}) is Op.TRIAL and op_of({"op": "nonsense"}) is None and op_of({}) is None
    assert op_of({"op": 3}) is None
    assert Ready.is_ready(wire(Ready())) and not Ready.is_ready({"ready": True})
    assert wire(Exit()) == {"op": "exit"} and wire(ProfileRequest()) == {"op": "profile"}


def test_the_channel_turns_what_is_not_a_json_object_into_a_closed_channel() -> None:
    ours, theirs = socket.socketpair()
    channel = Channel(ours)
    try:
        for garbage in (b"\xff\xfe not json", b"[1, 2, 3]"):
            theirs.sendall(struct.pack(">I", len(garbage)) + garbage)
            with pytest.raises(ChannelClosed, match="malformed"):
                channel.recv(timeout=5)
        theirs.sendall(struct.pack(">I", 1 << 30))
        with pytest.raises(ChannelClosed, match="exceeds"):
            channel.recv(timeout=5)
    finally:
        channel.close()
        theirs.close()


@pytest.mark.parametrize("timeout", [None, 5.0], ids=["no_deadline", "deadline"])
def test_a_channel_closed_under_a_reader_is_a_closed_channel(timeout: float | None) -> None:
    """A cancel closes a sandbox's channel from another thread; the thread using it must see the
    channel closed (the evaluation becomes ``cancelled``), never the socket's EBADF escaping as an
    OSError (a Ctrl-C during the baselines was stored as an ``infra`` error in a `make test` run)."""
    ours, theirs = socket.socketpair()
    channel = Channel(ours)
    channel.close()
    try:
        with pytest.raises(ChannelClosed):
            channel.recv(timeout=timeout)
        with pytest.raises(ChannelClosed):
            channel.recv_frame(timeout=timeout)
        with pytest.raises(ChannelClosed):
            channel.send_frame(b"{}")
    finally:
        theirs.close()
