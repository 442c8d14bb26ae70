"""The trusted side of the metered loop: which calls run, on which inputs, which get audited.

`drive` talks to a sandbox that entered `kl_meter.run` (a candidate or the reference): one GO frame
per call, with the input set, seeds unknown to the sandbox until then and a nonce the DONE frame must
echo. The trusted clock times every round trip (``trusted_ms``), so each call carries two figures:
the loop's sample and ours (`harness.meter.clock` pairs them). The stopping rule (warm-up, adaptive
repeats until the standard error is small enough, a time cap) runs here, and an audited call is
picked at random after its DONE arrived: the sandbox cannot know which of its calls will be compared.
Standard library only.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import secrets
import statistics
import time
from dataclasses import dataclass, field, replace

from harness.channel import Channel, ChannelClosed, parse_message
from harness.meter.frames import AuditFrame, DoneFrame, DoneStatus, GoFlags, go_frame, read_reply_frame
from harness.options import TimingOptions
from vocabulary.wire import JsonObject, WireError

__all__ = ["AuditedOutput", "CallPlan", "MeteredCall", "MeteredRun", "drive"]

#: The noise check costs O(n); every few samples is enough.
_CHECK_EVERY = 5
#: Seeds stay below 2**63 (torch takes them as signed 64-bit integers).
_SEED_BITS = 63


@dataclass(frozen=True, kw_only=True)
class CallPlan:
    """How many calls a run makes and how many of them are audited (the trusted side's half)."""

    warmup_ms: float
    min_warmup_calls: int
    min_repeats: int
    max_repeats: int
    target_rel_stderr: float
    max_time_s: float
    #: Input sets rotated across calls.
    sets: int
    #: Timed calls audited at random (about this many by the ``min_repeats``-th, fewer per call after:
    #: `audit_chance`; 0: none).
    audits: int = 0
    #: One more call per input set not yet audited, audited, after the timed ones.
    audit_each_set: bool = False
    #: Seed the forward's generators before each call (a RANDOM problem).
    seed_forward: bool = False

    @classmethod
    def from_timing(cls, timing: TimingOptions, sets: int, *, audits: bool, seed_forward: bool) -> CallPlan:
        return cls(warmup_ms=timing.warmup_ms, min_warmup_calls=timing.min_warmup_calls,
                   min_repeats=timing.min_repeats, max_repeats=max(timing.max_repeats, timing.min_repeats),
                   target_rel_stderr=timing.target_rel_stderr, max_time_s=timing.max_time_s, sets=max(1, sets),
                   audits=timing.audits if audits else 0, audit_each_set=audits, seed_forward=seed_forward)

    def longer(self, calls: int) -> CallPlan:
        """A rerun's plan: at least twice the ``calls`` a first run made, in up to twice its time
        (on a loaded host, more chances of calls that ran through)."""
        return replace(self, min_repeats=max(self.min_repeats, 2 * calls), max_repeats=max(self.max_repeats, 2 * calls),
                       max_time_s=2 * self.max_time_s)


@dataclass(frozen=True)
class MeteredCall:
    """One call: its inputs (set and seeds, known to the trusted side only until its GO frame),
    the loop's sample and the trusted clock's round trip, both in milliseconds."""

    call: int
    input_set: int
    input_seed: int
    forward_seed: int
    sample_ms: float
    trusted_ms: float
    warmup: bool


@dataclass(frozen=True)
class AuditedOutput:
    """An audited call's captured output: a sealed memfd (``fd``, the holder's to close) and its
    description (dtype and shape per tensor, whether forward returned one)."""

    call: MeteredCall
    nbytes: int
    description: JsonObject
    fd: int

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass(frozen=True)
class MeteredRun:
    """What a run found: every call, the audited outputs, and how it ended.

    ``failure``: the DONE frame of a call the candidate's code failed (forward raised, an output
    that is not a plain tensor, TF32 on); ``protocol_error``: the sandbox broke the protocol (a
    frame out of turn, a wrong nonce, a malformed frame): nothing it reported can be believed.
    """

    calls: tuple[MeteredCall, ...]
    audits: tuple[AuditedOutput, ...] = ()
    failure: DoneFrame | None = None
    protocol_error: str | None = None
    wall_s: float = 0.0
    #: The sandbox's JSON message, when it sent one instead of a frame (its own failure report).
    message: JsonObject | None = field(default=None)

    @property
    def timed(self) -> tuple[MeteredCall, ...]:
        return tuple(c for c in self.calls if not c.warmup)

    def close(self) -> None:
        for audit in self.audits:
            audit.close()


class _Driver:
    def __init__(self, channel: Channel, plan: CallPlan, deadline: float, first_call: int) -> None:
        self.channel = channel
        self.plan = plan
        self.deadline = deadline
        self.next_call = first_call
        self.calls: list[MeteredCall] = []
        self.audits: list[AuditedOutput] = []
        self.rng = random.Random(secrets.randbits(64))

    def _remaining(self) -> float:
        return max(0.001, self.deadline - time.monotonic())

    def call(self, input_set: int, *, warmup: bool) -> DoneFrame | str | JsonObject:
        """One call; its DONE frame (OK or not), or why the sandbox broke the protocol, or the
        sandbox's JSON message if it sent one instead."""
        call, nonce = self.next_call, secrets.randbits(64)
        input_seed, forward_seed = secrets.randbits(_SEED_BITS), secrets.randbits(_SEED_BITS)
        self.next_call += 1
        flags = GoFlags.SEED_FORWARD if self.plan.seed_forward else GoFlags.CALL
        frame = go_frame(flags, call=call, input_seed=input_seed, forward_seed=forward_seed, nonce=nonce,
                         input_set=input_set)
        started = time.perf_counter()
        self.channel.send_frame(frame)
        reply = self.channel.recv_frame(self._remaining())
        trusted_ms = (time.perf_counter() - started) * 1e3
        reply.close_fds()
        if reply.payload[:1] == b"{":
            return parse_message(reply.payload)
        try:
            done = read_reply_frame(reply.payload)
        except WireError as exc:
            return f"the sandbox sent a malformed frame during call {call}: {exc}"
        if not isinstance(done, DoneFrame) or done.call != call or done.nonce != nonce:
            return f"the sandbox answered out of turn during call {call}"
        if done.status is DoneStatus.OK and not (math.isfinite(done.sample_ms) and done.sample_ms >= 0):
            return f"the sandbox reported a sample of {done.sample_ms!r} ms for call {call}"
        self.calls.append(MeteredCall(call, input_set, input_seed, forward_seed, done.sample_ms, trusted_ms, warmup))
        return done

    def audit(self) -> str | None:
        """Ask for the last call's captured output; why the sandbox broke the protocol, or None."""
        last = self.calls[-1]
        self.channel.send_frame(go_frame(GoFlags.AUDIT))
        reply = self.channel.recv_frame(self._remaining())
        try:
            frame = read_reply_frame(reply.payload) if reply.payload[:1] != b"{" else None
        except WireError as exc:
            reply.close_fds()
            return f"the sandbox sent a malformed audit of call {last.call}: {exc}"
        if not isinstance(frame, AuditFrame) or frame.call != last.call or len(reply.fds) != 1:
            reply.close_fds()
            return f"the sandbox answered out of turn when call {last.call} was audited"
        self.audits.append(AuditedOutput(last, frame.nbytes, frame.description, reply.fds[0]))
        return None


def audit_chance(plan: CallPlan, timed_call: int) -> float:
    """The chance that timed call number ``timed_call`` (from 1) is audited: ``audits`` spread over
    the first ``min_repeats`` calls, then ``audits / timed_call``. A run that settles as soon as it
    may (most do) is audited about ``audits`` times, not the ``audits · min_repeats / max_repeats``
    of a rate spread over the most calls it could make; one of n calls about
    ``audits · (1 + ln(n / min_repeats))`` times, so the outputs held until the run ends grow
    with the log of its length."""
    return min(1.0, plan.audits / max(plan.min_repeats, timed_call, 1))


def _settled(samples: list[float], plan: CallPlan) -> bool:
    if len(samples) < plan.min_repeats or len(samples) % _CHECK_EVERY:
        return False
    mean = statistics.fmean(samples)
    if mean <= 0:
        return True
    return statistics.stdev(samples) / math.sqrt(len(samples)) / mean < plan.target_rel_stderr


def drive(channel: Channel, plan: CallPlan, *, timeout_s: float, first_call: int = 0) -> MeteredRun:
    """Run the calls of ``plan`` on a sandbox waiting in its metered loop, then stop the loop.

    Raises:
        ChannelTimeout: the run did not end within ``timeout_s``.
        ChannelClosed: the sandbox died.
    """
    started = time.perf_counter()
    driver = _Driver(channel, plan, time.monotonic() + timeout_s, first_call)

    def finish(failure: DoneFrame | None = None, protocol_error: str | None = None,
               message: JsonObject | None = None) -> MeteredRun:
        if protocol_error is None and message is None:
            with contextlib.suppress(ChannelClosed):
                channel.send_frame(go_frame(GoFlags.STOP))
        return MeteredRun(tuple(driver.calls), tuple(driver.audits), failure, protocol_error,
                          time.perf_counter() - started, message)

    def step(input_set: int, *, warmup: bool) -> MeteredRun | None:
        outcome = driver.call(input_set, warmup=warmup)
        if isinstance(outcome, str):
            return finish(protocol_error=outcome)
        if isinstance(outcome, dict):
            return finish(message=outcome)
        if outcome.status is not DoneStatus.OK:
            return finish(failure=outcome)
        return None

    # Warm-up: module loads, autotuning and allocator growth stay out of the samples.
    warm_ms = 0.0
    warm = 0
    while warm < plan.min_warmup_calls or (warm_ms < plan.warmup_ms and warm < 10 * max(1, plan.min_warmup_calls)):
        ended = step(warm % plan.sets, warmup=True)
        if ended is not None:
            return ended
        warm_ms += driver.calls[-1].trusted_ms
        warm += 1
    samples: list[float] = []
    trusted_s = 0.0
    audited_sets: set[int] = set()
    i = 0
    while True:
        input_set = i % plan.sets
        ended = step(input_set, warmup=False)
        if ended is not None:
            return ended
        last = driver.calls[-1]
        samples.append(last.sample_ms)
        trusted_s += last.trusted_ms / 1e3
        i += 1
        # Decided after the DONE arrived: nothing the sandbox saw told it this call would be compared.
        if driver.rng.random() < audit_chance(plan, i):
            broken = driver.audit()
            if broken is not None:
                return finish(protocol_error=broken)
            audited_sets.add(input_set)
        if len(samples) >= plan.max_repeats or trusted_s >= plan.max_time_s or _settled(samples, plan):
            break
    if plan.audit_each_set:
        # Every input set compared at least once, in calls that look like every other.
        for input_set in range(plan.sets):
            if input_set in audited_sets:
                continue
            ended = step(input_set, warmup=False)
            if ended is not None:
                return ended
            broken = driver.audit()
            if broken is not None:
                return finish(protocol_error=broken)
    return finish()
