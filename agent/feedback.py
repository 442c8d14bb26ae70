"""What the model reads after each tool call, and the attempt log a compacted history keeps.

Everything here works on `harness.Verdict` values; a verdict served again from the store is read
back into one (``Verdict.from_dict`` at the column), so it reads exactly like a fresh one.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vocabulary.causes import grouped_kernel_errors
from vocabulary.devices import DeviceSpecs
from vocabulary.flags import Flag
from vocabulary.timing import Timing
from vocabulary.verdict import Status, Trial, Verdict

__all__ = [
    "FLAG_MEANING",
    "AttemptNote",
    "change_summary",
    "gpu_summary",
    "verdict_feedback",
]

#: Characters of compiler output, load errors and logs shown to the model (the harness trims too).
MAX_ERROR_CHARS = 2500
MAX_LOG_CHARS = 1200
#: Rows of the profiler table shown.
PROFILE_ROWS = 10
#: Trials listed one by one; the rest are counted.
MAX_TRIAL_LINES = 8

_CPP_SUFFIXES = (".cpp", ".cc", ".cxx")
#: The precompiled-header outcomes that mean the binding parsed torch/extension.h itself.
_PCH_MISSES = ("missing", "rejected", "not_first_include", "full", "failed", "not_gcc")
_SPLIT_ADVICE = ("kernels and a C launcher in cuda_sources with CUDA headers only and no_implicit_headers=True, the "
                 "torch binding in cpp_sources (first line #include <torch/extension.h>, extra_cflags=[\"-O1\"]); "
                 "an edit of the kernels alone then recompiles only cuda.cu")

#: What each integrity flag means, and what to do about it.
FLAG_MEANING: dict[str, str] = {
    Flag.TF32_ENABLED: "the candidate switched TF32 on; leave torch.backends' TF32 switches alone (TF32 is off)",
    Flag.MUTATED_INPUTS: "forward modified its input tensors in place; write to new tensors",
    Flag.BACKGROUND_THREADS: "threads were left running after forward (deferred work is not allowed)",
    Flag.DEFERRED_WORK: "the output kept changing after forward returned: finish all work on forward's stream "
                        "before returning (no side streams or threads left running)",
    Flag.NO_CUSTOM_KERNEL: "no extension was built: the file must build its own kernel with load_inline",
    Flag.EXTENSION_DOES_NO_WORK: "replacing your extension's functions with no-ops still gave the right output: "
                                 "your extension does no real work (torch computes the result)",
    Flag.TORCH_COMPUTE_IN_PURE_FORWARD: "the problem's policy is pure, but forward computes with torch ops",
    Flag.CLOCK_DISAGREES: "the times reported from your process are less than the harness's own clock measured "
                          "for the same calls (every call is timed from outside your process too)",
    Flag.TIMED_OUTPUT_MISMATCH: "outputs of timed calls (compared at random, after they returned) differ from the "
                                "reference: caching by pointer or shape, work skipped when not checked, or races",
    Flag.TIMED_OUTPUT_NOT_PLAIN: "forward must return plain torch.Tensor output(s), complete when it returns (no "
                                 "tensor subclasses, proxies or lazily computed values)",
    Flag.TIMING_PROTOCOL_BROKEN: "something in your process wrote to the harness's channel: touch nothing of the "
                                 "harness's (its sockets, its modules)",
    Flag.HARNESS_TAMPERED: "your code changed the harness's functions in its process; leave them alone",
    Flag.SPEEDUP_OVER_LIMIT: "the speedup over eager is above the quarantine limit (10x)",
    Flag.FASTER_THAN_ROOFLINE: "the time is well below the roofline's lower bound for this device",
    Flag.HOST_LOADED: "the host was busy while this was timed: the times and speedups may be off by a lot; "
                      "do not chase small differences, compare again on a later benchmark",
}


def _fmt_ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:.1f} ms"
    if value >= 1:
        return f"{value:.3f} ms"
    return f"{value * 1000:.1f} us"


def _fmt_num(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def _fmt_speedup(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}x " + ("faster" if value >= 1 else "(slower than it)")


def _clip(text: str, limit: int, *, tail: bool = False) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return ("[...]\n" + text[-limit:]) if tail else (text[:limit] + "\n[... trimmed]")


_MANGLED = re.compile(r"^_Z(?:N\d*)?(\d+)([A-Za-z_]\w*)")


def _kernel_name(name: str) -> str:
    """The identifier inside an Itanium-mangled name (enough to tell kernels apart)."""
    match = _MANGLED.match(name)
    if match and len(match.group(2)) >= int(match.group(1)):
        return match.group(2)[: int(match.group(1))]
    return name


def _trial_label(trial: Trial) -> str:
    kind = trial.kind
    if kind == "random":
        what = "random inputs"
    elif kind == "variant":
        what = "variant inputs: uniform values in [-2.5, 3.5)"
    elif kind.startswith("shape:"):
        what = f"extra shape {kind.removeprefix('shape:')}"
    else:
        what = kind
    return f"trial {trial.seed_index} ({what})"


def _tolerance_text(verdict: Verdict) -> str:
    tol = verdict.provenance.tolerance
    atol, rtol = (tol.atol, tol.rtol) if tol is not None else (None, None)
    if atol is None and rtol is None:
        return "|out - ref| <= atol + rtol*|ref| with atol = rtol = 1e-4 for float32 (1e-2 for fp16/bf16)"
    return f"|out - ref| <= atol + rtol*|ref| with atol = {atol}, rtol = {rtol}"


def _build_lines(verdict: Verdict) -> list[str]:
    lines: list[str] = []
    if verdict.compile is None:
        return lines
    extensions = [e.to_dict() for e in verdict.compile.extensions]
    if extensions:
        built = ", ".join(f"{e.get('name')} ({'reused build' if e.get('cached') else 'built'}"
                          f"{', lazily in ' + str(e['lazy']) if e.get('lazy') else ''})" for e in extensions)
        lines.append(f"build: {built}; compile time {verdict.compile.seconds:.1f} s")
        lines.extend(_compile_cost_lines(extensions))
    kernels = [k.to_dict() for k in verdict.compile.kernels]
    if kernels:
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for k in kernels:
            groups.setdefault(_kernel_name(str(k.get("kernel", "?"))), []).append(k)
        lines.append("kernels (ptxas):")
        for name, variants in list(groups.items())[:8]:
            regs = sorted({int(k["registers"]) for k in variants if k.get("registers") is not None})
            reg_text = "?" if not regs else (str(regs[0]) if len(regs) == 1 else f"{regs[0]}-{regs[-1]}")
            stores = max(int(k.get("spill_stores", 0) or 0) for k in variants)
            loads = max(int(k.get("spill_loads", 0) or 0) for k in variants)
            text = f"  {name}" + (f" ({len(variants)} instantiations)" if len(variants) > 1 else "")
            text += f": {reg_text} registers, "
            if stores or loads:
                text += (f"up to {stores} B spill stores / {loads} B spill loads (SPILLS: reduce live registers "
                         "or add __launch_bounds__)")
            else:
                text += "no spills"
            smem = max(int(k.get("smem_bytes", 0) or 0) for k in variants)
            if smem:
                text += f", up to {smem} B static smem"
            lines.append(text)
    return lines


def _compile_cost_lines(extensions: Sequence[Mapping[str, Any]]) -> list[str]:
    """What each translation unit of a fresh build cost, and how the next attempt can cost less."""
    lines: list[str] = []
    for ext in extensions:
        units = [u for u in ext.get("units") or () if isinstance(u, Mapping)]
        if ext.get("cached") or not units:
            if not ext.get("cached") and ext.get("builder_refusal"):
                lines.append(f"  {ext.get('name')}: built whole, without reusing unchanged parts, because of "
                             f"{ext.get('builder_refusal')} (plain load_inline arguments, no paths in flags, allow "
                             "reuse)")
            continue
        steps = [f"{u.get('source')} reused from an earlier build (same text and flags)" if u.get("reused")
                 else f"{u.get('source')} {float(u.get('seconds') or 0.0):.1f} s" for u in units]
        lines.append(f"  {ext.get('name')}: " + "; ".join(steps))
        fresh = [u for u in units if not u.get("reused")]
        heavy_cu = [u for u in fresh if str(u.get("source", "")).endswith(".cu") and u.get("torch_headers")]
        binding = [u for u in fresh if str(u.get("source", "")).endswith(_CPP_SUFFIXES)]
        pch_record = ext.get("pch")
        pch: Mapping[str, Any] = pch_record if isinstance(pch_record, Mapping) else {}
        if heavy_cu:
            lines.append(f"  compile cost: cuda.cu includes torch headers (an #include <torch/...>, or load_inline's "
                         f"implicit ones without no_implicit_headers=True), so nvcc parses them again on every kernel "
                         f"edit ({float(heavy_cu[0].get('seconds') or 0.0):.0f} s here). Cheaper: {_SPLIT_ADVICE}.")
        if binding and pch.get("status") in _PCH_MISSES:
            why = pch.get("reason") or pch["status"]
            lines.append(f"  compile cost: the binding parsed torch/extension.h itself ({why}); "
                         "extra_cflags=[\"-O1\"] (or -O2/-O3) and #include <torch/extension.h> as the first line "
                         "of cpp_sources use a prepared header.")
        if binding and any(str(u.get("source", "")).endswith(".cu") for u in fresh) and not heavy_cu:
            lines.append("  next attempt: keep cpp_sources, the extension's name and its flags unchanged when only the "
                         "kernels change, and the binding is reused (no compile).")
    return lines


def _hidden_failure_lines(verdict: Verdict) -> list[str]:
    """The failures the candidate's own code caught, with the compiler's errors: the true cause of
    whatever happened next, so they come first."""
    lines: list[str] = []
    where = {None: "at import", "import": "at import (in the run only: no GPU at compile time)",
             "__init__": "in ModelNew.__init__", "forward": "in forward"}
    for failure in verdict.compile.swallowed if verdict.compile is not None else ():
        lazy = failure.lazy.value if failure.lazy is not None else None
        lines.append(f"YOUR BUILD FAILED: load_inline of {failure.name!r} ({where[lazy]}) raised and your code caught "
                     "it, so your kernel never ran; first compiler errors:")
        lines.append(_clip(failure.errors or "(the compiler printed no error text)", MAX_ERROR_CHARS))
    for error, trials in grouped_kernel_errors(verdict.kernel_errors):
        lines.append(f"YOUR KERNEL RAISED: {error.function} raised in {', '.join(trials) or 'the load'} and your "
                     f"code caught it (forward went on without it): {_clip(error.error, MAX_LOG_CHARS)}")
    if lines:
        lines.append("(a kernel must fail loudly: remove the try/except fallback to see errors where they happen)")
    return lines


def _budget_lines(total_s: float | None, compiles: int | None) -> list[str]:
    if total_s is None:
        return []
    count = f" over {compiles} compile{'s' if compiles != 1 else ''}" if compiles else ""
    return [f"compile time so far in this session: {total_s:.0f} s{count} (time in the compiler is time not spent "
            "measuring kernels: reuse unchanged parts)"]


def _flag_lines(verdict: Verdict) -> list[str]:
    lines = []
    for flag in verdict.flags:
        lines.append(f"flag {flag}: {FLAG_MEANING.get(flag, 'see the message')}")
    for hint in verdict.hints:
        lines.append(f"hint: {hint}")
    return lines


def _trial_lines(verdict: Verdict) -> list[str]:
    trials = list(verdict.trials)
    failed = [t for t in trials if not t.passed]
    lines = []
    messages = {t.message for t in failed}
    if len(failed) > 1 and len(messages) == 1 and all(t.max_abs_err is None for t in failed):
        lines.append(f"  every failing trial ({', '.join(str(t.seed_index) for t in failed)}): "
                     f"{next(iter(messages)) or 'no comparable output'}")
        lines.extend(_failure_pattern(trials))
        return lines
    for trial in (failed or trials)[:MAX_TRIAL_LINES]:
        state = "FAIL" if not trial.passed else "ok"
        err = (f"max abs err {_fmt_num(trial.max_abs_err)}, mean abs err "
               f"{_fmt_num(trial.mean_abs_err)}, {100 * float(trial.mismatch_frac or 0):.1f}% "
               "of elements outside tolerance")
        if trial.max_abs_err is None and not trial.passed:
            err = trial.message or "no comparable output"
        lines.append(f"  {_trial_label(trial)}: {state}: {err}")
    hidden = len(failed or trials) - MAX_TRIAL_LINES
    if hidden > 0:
        lines.append(f"  [... {hidden} more]")
    passed = [t for t in trials if t.passed]
    if failed and passed:
        lines.append("  passing: " + ", ".join(_trial_label(t) for t in passed))
    lines.extend(_failure_pattern(trials))
    return lines


def _failure_pattern(trials: Sequence[Trial]) -> list[str]:
    """One line of diagnosis from which kinds of trials failed."""
    failed = [t for t in trials if not t.passed]
    if not failed:
        return []
    kinds = {t.kind.split(":")[0] for t in failed}
    all_kinds = {t.kind.split(":")[0] for t in trials}
    if kinds == {"shape"} and "random" in all_kinds:
        return ["diagnosis: only the extra-shape trials fail: something assumes the main sizes "
                "(hard-coded sizes, tails not handled, alignment or vector width assumptions)"]
    if kinds == {"variant"}:
        return ["diagnosis: only the other value distribution fails: a range or sign assumption, or an "
                "approximation (fast-math, low precision accumulation) that breaks on larger values"]
    if all(t.max_abs_err is None for t in failed):
        return ["diagnosis: no output could be compared (see the message): wrong shape, dtype or device, a "
                "non-tensor result, or an output that could not be handed over"]
    fracs = [float(t.mismatch_frac or 0) for t in failed]
    if len(failed) == len(trials) and min(fracs) > 0.5:
        return ["diagnosis: every trial fails on most elements: a systematic error (a missing term, a wrong "
                "parameter, wrong statistics for the mode, wrong layout/indexing)"]
    if max(fracs) < 0.05:
        return ["diagnosis: few elements are off: edges/tails, a race, or accumulated rounding"]
    return []


def _timing_lines(verdict: Verdict, timing: Timing, best_ms: float | None) -> list[str]:
    median = timing.median_ms
    lines = [f"time: {_fmt_ms(median)} median (IQR {_fmt_ms(timing.iqr_ms)}, n={timing.n})"]
    baselines = verdict.baselines
    if baselines is not None and baselines.eager is not None:
        lines.append(f"vs eager PyTorch {_fmt_ms(baselines.eager.median_ms)}: "
                     f"{_fmt_speedup(verdict.speedup_vs_eager)}")
    if baselines is not None and baselines.torch_compile is not None:
        lines.append(f"vs torch.compile {_fmt_ms(baselines.torch_compile.median_ms)}: "
                     f"{_fmt_speedup(verdict.speedup_vs_compile)}")
    for note in baselines.notes if baselines is not None else ():
        lines.append(f"baseline note: {note}")
    if verdict.sol_ms is not None:
        lines.append(f"roofline: speed-of-light {_fmt_ms(verdict.sol_ms)} "
                     f"({_fmt_num(verdict.flops)} FLOP, {_fmt_num(verdict.min_bytes)} B minimum "
                     f"traffic): you are at {_fmt_num(verdict.pct_of_sol)}% of SOL")
    for warning in timing.warnings:
        lines.append(f"timing warning: {warning}")
    if best_ms is not None and verdict.status is Status.PASS:
        if median < best_ms:
            lines.append(f"new best of this session (previous {_fmt_ms(best_ms)})")
        else:
            lines.append(f"best of this session so far: {_fmt_ms(best_ms)}")
    return lines


_NOT_KERNELS = ("aten::", "cuda", "Activity Buffer", "Memcpy", "Memset", "ProfilerStep")


def _profile_lines(verdict: Verdict) -> list[str]:
    rows = [row.to_dict() for row in verdict.profile]
    if not rows:
        return ["profile: no rows (nothing took measurable time?)"]

    def ms(row: Mapping[str, Any]) -> float:
        return float(row.get("ms_per_forward", row.get("total_ms", 0.0)) or 0.0)

    def table(title: str, picked: Sequence[Mapping[str, Any]]) -> list[str]:
        total = sum(ms(r) for r in picked) or 1.0
        out = [title, f"  {'ms':>9} {'share':>6} {'calls':>5}  name"]
        for row in picked[:PROFILE_ROWS]:
            out.append(f"  {ms(row):9.4f} {100 * ms(row) / total:5.1f}% {row.get('calls', '?'):>5}  "
                       f"{_kernel_name(str(row.get('name', '?')))[:100]}")
        if len(picked) > PROFILE_ROWS:
            out.append(f"  [... {len(picked) - PROFILE_ROWS} more rows]")
        return out

    if verdict.provenance.target != "cuda":
        return table("profile (self CPU time per forward):", rows)
    # On CUDA a torch op's device time includes its kernels': list the kernels, then the ops apart.
    kernels = [r for r in rows if not str(r.get("name", "")).startswith(_NOT_KERNELS)]
    ops = [r for r in rows if str(r.get("name", "")).startswith("aten::")]
    lines = table("profile (GPU kernel time per forward; share of all kernels):", kernels or rows)
    if ops:
        lines.append("torch ops, inclusive of their kernels: " + ", ".join(
            f"{r.get('name')} {ms(r):.4g} ms" for r in ops[:5]))
    return lines


def verdict_feedback(tool: str, verdict: Verdict, *, reused_from: str | None = None,
                     best_ms: float | None = None, compile_s_total: float | None = None,
                     compiles: int | None = None) -> str:
    """The tool message for one code-running call.

    Args:
        tool: the tool the model called.
        verdict: the referee's verdict (fresh, or read back from the store).
        reused_from: the tool of the earlier identical attempt whose verdict is served again.
        best_ms: the fastest verified time of this trajectory before this call.
        compile_s_total: seconds this trajectory's attempts have spent compiling so far (this one
            included), and ``compiles`` how many compiles that was: the model's compile budget.
    """
    status = verdict.status.value
    stage = verdict.stage.value
    message = verdict.message
    lines = [f"{tool}: {status.upper()} (stage {stage}) - {message.splitlines()[0] if message else ''}".rstrip(" -")]
    if reused_from:
        lines.append(f"(identical source to an earlier {reused_from} call: its stored verdict, not re-run)")
    lines.extend(_hidden_failure_lines(verdict))
    lines.extend(f"note: {note}" for note in verdict.notes)
    if status == "error" and stage == "compile":
        errors = str((verdict.compile.errors if verdict.compile else "") or verdict.log or message).strip()
        if errors:
            lines.append("the extension did not build; first compiler errors:")
            lines.append(_clip(errors, MAX_ERROR_CHARS))
        else:  # a heading followed by nothing reads as a cut-off message
            lines.append("the extension did not build, and the compiler printed no error text")
        lines.extend(_budget_lines(compile_s_total, compiles))
        if "main.cpp" in errors or "cuda.cu" in errors:
            lines.append("(load_inline writes cpp_sources to main.cpp and cuda_sources to cuda.cu; with "
                         "no_implicit_headers=True line N is line N of that string, counting the newline "
                         "right after r\"\"\" as line 1; without it, load_inline prepends 1 line to main.cpp "
                         "and 3 to cuda.cu)")
        return "\n".join(lines)
    lines.extend(_build_lines(verdict))
    lines.extend(_budget_lines(compile_s_total, compiles))
    if status == "error":
        detail = "\n".join(message.splitlines()[1:])
        if detail:
            lines.append(_clip(detail, MAX_ERROR_CHARS))
        log = verdict.log
        if log and log.strip() not in detail:
            lines.append("log tail:\n" + _clip(log, MAX_LOG_CHARS, tail=True))
        if stage == "load":
            lines.append("(loading = importing your file, building ModelNew(*get_init_inputs()), loading the "
                         "reference state_dict into it, moving it to the device)")
    if verdict.trials:
        trials = verdict.trials
        passed = sum(1 for t in trials if t.passed)
        lines.append(f"correctness: {passed}/{len(trials)} trials pass ({_tolerance_text(verdict)})")
        if passed < len(trials):
            lines.extend(_trial_lines(verdict))
        else:
            worst = max((t.max_abs_err or 0.0) for t in trials)
            lines.append(f"  largest abs error over all trials: {_fmt_num(worst)}")
    lines.extend(_flag_lines(verdict))
    if verdict.timing is not None:
        lines.extend(_timing_lines(verdict, verdict.timing, best_ms))
    if verdict.profile:
        lines.extend(_profile_lines(verdict))
    if status == "suspicious":
        lines.append("QUARANTINED: this result will be re-timed in a fresh process with fresh seeds before it "
                     "can count; if it skips or caches work, it will be rejected.")
    elif status == "pass" and verdict.depth in ("compile", "correctness"):
        lines.append("(not timed: call benchmark for timing, or profile for a per-kernel breakdown)")
    return "\n".join(lines)


# -- the device ---------------------------------------------------------------------------------
def gpu_summary(specs: DeviceSpecs) -> str:
    """A few lines about the device, with the ridge point (FLOP per byte) the playbook asks for."""
    peaks = specs.peak_flops
    fp32 = peaks.get("fp32")
    bandwidth = specs.measured_bandwidth
    parts = [specs.name or "unknown device"]
    if specs.target == "cuda":
        if specs.compute_capability:
            parts.append(f"compute capability {specs.compute_capability}")
        if specs.multiprocessors:
            parts.append(f"{specs.multiprocessors} SMs")
        if specs.l2_bytes:
            parts.append(f"L2 {specs.l2_bytes / 2**20:.0f} MiB")
        if specs.memory_bytes:
            parts.append(f"{specs.memory_bytes / 2**30:.0f} GiB memory")
        if specs.shared_memory_per_block_optin:
            parts.append(f"{specs.shared_memory_per_block_optin // 1024} KiB shared memory per block (opt-in)")
    elif specs.cores:
        parts.append(f"{specs.cores} cores")
    lines = [", ".join(parts)]
    if peaks:
        rates = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in peaks.items())
        lines.append(f"peak rates ({specs.peak_source}): {rates}; TF32 is off, so fp32 math runs at "
                     "the fp32 rate")
    if bandwidth:
        lines.append(f"memory bandwidth (measured copy): {bandwidth / 1e9:.0f} GB/s")
    if fp32 and bandwidth:
        lines.append(f"ridge point: {fp32 / bandwidth:.1f} FLOP/byte at fp32 (below it a kernel is memory-bound)")
    return "\n".join(lines)


# -- the attempt log -----------------------------------------------------------------------------
@dataclass(frozen=True)
class AttemptNote:
    """One attempt as a short reference: what a compacted history keeps of it.

    ``source_sha256`` names the source; ``changed`` says how it differs from the source it was
    derived from (``+12/-3 lines vs 1a2b3c4d``), so the model can follow its own edits without
    the full sources.
    """

    tool: str
    status: str
    stage: str
    median_ms: float | None = None
    speedup: float | None = None
    note: str = ""
    source_sha256: str = ""
    changed: str = ""

    def line(self, n: int) -> str:
        text = f"{n}. {self.tool}"
        if self.source_sha256:
            text += f" of source {self.source_sha256[:8]}"
        text += f": {self.status} (stage {self.stage})"
        if self.median_ms is not None:
            text += f", {_fmt_ms(self.median_ms)}"
        if self.speedup is not None:
            text += f", {self.speedup:.2f}x vs eager"
        if self.note:
            text += f" - {self.note}"
        return text + (f" [{self.changed}]" if self.changed else "")

    @classmethod
    def from_verdict(cls, tool: str, verdict: Verdict, *, source_sha256: str = "",
                     changed: str = "") -> AttemptNote:
        message = verdict.message.splitlines()
        return cls(tool=tool, status=verdict.status.value, stage=verdict.stage.value,
                   median_ms=verdict.timing.median_ms if verdict.timing else None,
                   speedup=verdict.speedup_vs_eager,
                   note=(message[0][:120] if message else ""), source_sha256=source_sha256, changed=changed)


def change_summary(source: str, parent: str | None, parent_sha256: str | None) -> str:
    """How ``source`` differs from the one it was derived from, in a few words."""
    if parent is None or parent_sha256 is None:
        return "first version"
    added = removed = 0
    for line in difflib.unified_diff(parent.splitlines(), source.splitlines(), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    return f"+{added}/-{removed} lines vs {parent_sha256[:8]}"


def tool_error(text: str) -> str:
    """A tool result that reports a malformed call."""
    return f"error: {text}"


def dumps_specs(specs: DeviceSpecs) -> str:
    return json.dumps(specs.to_dict(), indent=1, sort_keys=True, default=str)
