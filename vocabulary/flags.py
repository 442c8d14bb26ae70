"""Integrity flags and policy rules shared by the orchestrator and the candidate stage. Stdlib only.

Dynamic checks decide (the flags below fail a candidate); static patterns (`harness.hints`) only
advise. See docs/integrity.md for the threat model.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DECISIVE_FLAGS", "FLAG_TEXT", "NOTICE_FLAGS", "QUARANTINE_FLAGS", "Flag"]


class Flag(StrEnum):
    """An integrity finding in `Verdict.flags`: keys `FLAG_TEXT` here and the agent's advice
    (``agent.feedback.FLAG_MEANING``); a test checks both cover every flag."""

    TF32_ENABLED = "tf32_enabled"
    MUTATED_INPUTS = "mutated_inputs"
    BACKGROUND_THREADS = "background_threads"
    DEFERRED_WORK = "deferred_work"
    NO_CUSTOM_KERNEL = "no_custom_kernel"
    EXTENSION_DOES_NO_WORK = "extension_does_no_work"
    TORCH_COMPUTE_IN_PURE_FORWARD = "torch_compute_in_pure_forward"
    CLOCK_DISAGREES = "clock_disagrees"
    TIMED_OUTPUT_MISMATCH = "timed_output_mismatch"
    TIMED_OUTPUT_NOT_PLAIN = "timed_output_not_plain"
    TIMING_PROTOCOL_BROKEN = "timing_protocol_broken"
    HARNESS_TAMPERED = "harness_tampered"
    SPEEDUP_OVER_LIMIT = "speedup_over_limit"
    FASTER_THAN_ROOFLINE = "faster_than_roofline"
    HOST_LOADED = "host_loaded"


#: Keyed by `Flag` (typed by its ``str`` values: the pipe and the column carry strings).
FLAG_TEXT: dict[str, str] = {
    Flag.TF32_ENABLED: "the candidate switched TF32 on",
    Flag.MUTATED_INPUTS: "the candidate modified its inputs",
    Flag.BACKGROUND_THREADS: "the candidate left threads running after forward (deferred work)",
    Flag.DEFERRED_WORK: "the output kept changing after forward returned: work left running on another "
                        "stream or thread is not finished when forward's stream is",
    Flag.NO_CUSTOM_KERNEL: "the candidate built no extension: no custom kernel ran",
    Flag.EXTENSION_DOES_NO_WORK: "replacing the candidate's kernels with no-ops leaves the output correct: "
                                 "its extension does no real work",
    Flag.TORCH_COMPUTE_IN_PURE_FORWARD: "the problem's policy is pure, but forward computes with torch",
    Flag.CLOCK_DISAGREES: "the times reported from the candidate's process are less than the trusted clock "
                          "measured for the same calls: the timing was tampered with",
    Flag.TIMED_OUTPUT_MISMATCH: "outputs of timed calls, audited at random after they returned, differ from the "
                                "reference",
    Flag.TIMED_OUTPUT_NOT_PLAIN: "a timed call returned something other than plain torch.Tensor output(s) "
                                 "computed by the time forward returned (a subclass, a proxy or a lazy value)",
    Flag.TIMING_PROTOCOL_BROKEN: "the candidate's process broke the timing loop's protocol (a frame out of turn "
                                 "or forged): nothing it reported can be believed",
    Flag.HARNESS_TAMPERED: "the candidate changed the referee's code in its own process",
    Flag.SPEEDUP_OVER_LIMIT: "speedup over eager above the quarantine limit",
    Flag.FASTER_THAN_ROOFLINE: "faster than the device's roofline allows",
    Flag.HOST_LOADED: "timed while the host was loaded (load average above its cores): the CPU figures and "
                      "the speedups may be off; re-time on a quiet host before trusting them",
}
#: Not failures: a suspicious verdict waits for a re-timing in a fresh process.
QUARANTINE_FLAGS = frozenset({Flag.SPEEDUP_OVER_LIMIT, Flag.FASTER_THAN_ROOFLINE})
#: Neither failures nor quarantine: what a reader of the figures must know (`harness.assembly`).
NOTICE_FLAGS = frozenset({Flag.HOST_LOADED})
DECISIVE_FLAGS = frozenset(FLAG_TEXT) - QUARANTINE_FLAGS - NOTICE_FLAGS
