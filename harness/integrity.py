"""Integrity flags and policy rules shared by the orchestrator and the candidate stage. Stdlib only.

Dynamic checks decide (the flags below fail a candidate); static patterns (`harness.hints`) only
advise. See docs/integrity.md for the threat model.
"""

from __future__ import annotations

__all__ = ["DECISIVE_FLAGS", "FLAG_TEXT", "PURE_ALLOWED_OPS", "QUARANTINE_FLAGS"]

FLAG_TEXT = {
    "tf32_enabled": "the candidate switched TF32 on",
    "mutated_inputs": "the candidate modified its inputs",
    "background_threads": "the candidate left threads running after forward (deferred work)",
    "deferred_work": "the output kept changing after forward returned: work left running on another "
                     "stream or thread is not finished when forward's stream is",
    "no_custom_kernel": "the candidate built no extension: no custom kernel ran",
    "extension_does_no_work": "replacing the candidate's kernels with no-ops leaves the output correct: "
                              "its extension does no real work",
    "torch_compute_in_pure_forward": "the problem's policy is pure, but forward computes with torch",
    "clock_disagrees": "the reported kernel times are impossible (not positive, more than the trusted "
                       "wall clock, or, in a hardened re-time, far less than the trusted clock measured "
                       "for the dictated calls): the timer was tampered with",
    "timed_output_mismatch": "outputs of timed calls differ from the reference",
    "speedup_over_limit": "speedup over eager above the quarantine limit",
    "faster_than_roofline": "faster than the device's roofline allows",
}
#: Not failures: a suspicious verdict waits for a re-timing in a fresh process.
QUARANTINE_FLAGS = frozenset({"speedup_over_limit", "faster_than_roofline"})
DECISIVE_FLAGS = frozenset(FLAG_TEXT) - QUARANTINE_FLAGS

#: aten ops a "pure" forward may dispatch: allocation, views and metadata — no compute.
PURE_ALLOWED_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "view", "_unsafe_view", "reshape", "as_strided", "permute", "transpose", "t",
    "expand", "squeeze", "unsqueeze", "select", "slice", "narrow", "detach", "alias", "lift_fresh",
    "split", "split_with_sizes", "chunk", "unbind", "sym_size", "sym_stride", "sym_numel",
    "is_contiguous", "_local_scalar_dense", "view_as", "expand_as", "flatten", "unflatten",
})
