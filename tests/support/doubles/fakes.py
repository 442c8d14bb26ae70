"""`FakeEvaluator`: canned verdicts by source, no compiles, for fast tests of the loop."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from vocabulary.builds import CompileResult, ExtensionBuild, KernelInfo
from vocabulary.devices import DeviceSpecs
from vocabulary.evaluation import Depth
from vocabulary.provenance import Provenance, Tolerance
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import ErrorKind, ProfileRow, Stage, Status, Trial, Verdict

__all__ = ["FAKE_SPECS", "FakeCandidate", "FakeEvaluator", "make_verdict"]

FAKE_SPECS = DeviceSpecs(
    target="cuda", name="NVIDIA H200", compute_capability="9.0", multiprocessors=132,
    l2_bytes=60 * 2**20, memory_bytes=141 * 2**30, shared_memory_per_block_optin=232448,
    peak_flops={"fp32": 67e12, "bf16": 989e12}, measured_bandwidth=4.2e12, peak_source="datasheet (H200)",
    driver="570.00", cuda="13.0",
)

_KINDS = ("pass", "wrong", "compile_error", "load_error", "suspicious", "infra", "shape_only")


@dataclass(frozen=True)
class FakeCandidate:
    """How the fake judges one source.

    Args:
        kind: ``pass``, ``wrong`` (every trial off), ``shape_only`` (only the extra-shape trial fails),
            ``compile_error``, ``load_error``, ``suspicious`` (timed, but quarantined) or ``infra``.
        median_ms: its time when timed.
        infra_first: this many evaluations return an ``infra`` error before the real verdict.
    """

    kind: str = "pass"
    median_ms: float = 1.0
    infra_first: int = 0

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}")


def _trials(kind: str) -> tuple[Trial, ...]:
    kinds = ("random", "random", "random", "variant", "shape:0")
    trials = []
    for i, k in enumerate(kinds):
        bad = kind == "wrong" or (kind == "shape_only" and k.startswith("shape"))
        trials.append(Trial(seed_index=i, passed=not bad, max_abs_err=0.38 if bad else 2e-6,
                            mean_abs_err=0.05 if bad else 3e-7, mismatch_frac=0.985 if bad else 0.0, kind=k,
                            message="1545 of 1568 elements (98.5%) outside tolerance" if bad else ""))
    return tuple(trials)


#: What the referee says of a ModelNew that dropped BatchNorm's running statistics
#: (`harness.sandboxed.contract.reference_weights_for`).
_WEIGHTS_MISMATCH = (
    "ModelNew's parameters and buffers match Model's neither by name (every key of Model's state_dict, same "
    "shape) nor by registration order (the floating ones, one to one, same shapes); in registration order:\n"
    "   #  Model                      ModelNew\n"
    "   0  conv.weight (16, 8, 3, 3)  conv.weight (16, 8, 3, 3)\n"
    "   1  conv.bias (16,)            conv.bias (16,)\n"
    "   2  bn.weight (16,)            bn_weight (16,)\n"
    "   3  bn.bias (16,)              bn_bias (16,)\n"
    "   4  bn.running_mean (16,)      -   <- missing\n"
    "   5  bn.running_var (16,)       -   <- missing\n"
    "Keep every parameter and buffer of Model, under its name or created in the same order with the same shape "
    "(e.g. self.conv = nn.Conv2d(...), or self.weight = nn.Parameter(torch.empty(out, in, k, k)) first, then the "
    "bias).")


def make_verdict(kind: str, depth: Depth | str, *, median_ms: float = 1.0, eager_ms: float = 2.0,
                 compile_ms: float = 1.5) -> Verdict:
    """A realistic verdict of ``kind`` at ``depth`` (see `FakeCandidate`)."""
    depth = Depth(depth)
    provenance = Provenance(target="cuda", mode="train", policy="mixed", tolerance=Tolerance(default="per dtype"))
    built = CompileResult(ok=True, seconds=1.5, extensions=(ExtensionBuild(name="kl_fake", key="k", cached=True),),
                          kernels=(KernelInfo(kernel="_Z11fake_kernelPKfPfi", registers=32, spill_stores=0,
                                              spill_loads=0),))
    if kind == "infra":
        return Verdict(status=Status.ERROR, stage=Stage.PROBLEM, error_kind=ErrorKind.INFRA,
                       message="the reference process failed to start", depth=depth, provenance=provenance)
    if kind == "compile_error":
        errors = ("extension 'kl_fake' failed to compile\nmain.cpp:20:15: error: 'outt' was not declared in this "
                  "scope; did you mean 'out'?\n       20 |   float* op = outt.data_ptr<float>();")
        return Verdict(status=Status.ERROR, stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE,
                       message="compile failed", compile=CompileResult(ok=False, seconds=20.0, errors=errors),
                       log=errors, depth=depth, provenance=provenance)
    if depth == "compile":
        return Verdict(status=Status.PASS, stage=Stage.COMPILE, message="compiled", compile=built, depth=depth,
                       provenance=provenance)
    if kind == "load_error":
        return Verdict(status=Status.ERROR, stage=Stage.LOAD, error_kind=ErrorKind.CANDIDATE,
                       message="the reference weights do not fit ModelNew:\n" + _WEIGHTS_MISMATCH, compile=built,
                       depth=depth, provenance=provenance)
    trials = _trials(kind)
    if kind in ("wrong", "shape_only"):
        failed = [t for t in trials if not t.passed]
        return Verdict(status=Status.FAIL, stage=Stage.CORRECTNESS, compile=built, trials=trials, depth=depth,
                       message=f"{len(failed)} of {len(trials)} trials failed; trial {failed[0].seed_index} "
                       f"({failed[0].kind}): {failed[0].message}", provenance=provenance)
    if depth == "correctness":
        return Verdict(status=Status.PASS, stage=Stage.CORRECTNESS, message="correct (not timed)", compile=built,
                       trials=trials, depth=depth, provenance=provenance)
    if depth == "profile":
        rows = (ProfileRow(name="_Z11fake_kernelPKfPfi", calls=1, ms_per_forward=median_ms * 0.3),
                ProfileRow(name="cudnn::conv_fwd", calls=1, ms_per_forward=median_ms * 0.7))
        return Verdict(status=Status.PASS, stage=Stage.DONE, message="correct and profiled", compile=built,
                       trials=trials, depth=depth, profile=rows, provenance=provenance)
    samples = tuple(median_ms * f for f in (0.99, 1.0, 1.01, 1.0, 1.02))
    baselines = Baselines(eager=Timing.from_samples([eager_ms] * 5, clock="cuda_events"),
                          torch_compile=Timing.from_samples([compile_ms] * 5, clock="cuda_events"))
    timing = Timing.from_samples(samples, clock="cuda_events")
    verdict = Verdict(status=Status.PASS, stage=Stage.DONE, message="correct and timed", compile=built, trials=trials,
                      timing=timing, baselines=baselines, sol_ms=0.25, flops=76e9, min_bytes=0.4e9, depth=depth,
                      provenance=provenance)
    if kind == "suspicious":
        return verdict.with_changes(status=Status.SUSPICIOUS, flags=("speedup_over_limit",),
                                    message="quarantined: speedup over eager above the quarantine limit")
    return verdict


class FakeEvaluator:
    """Answers from a table of sources; counts every evaluation (thread-safe).

    An unknown source gets a compile error, like a file that does not build. ``delay_s`` makes
    each evaluation take that long (a wait that `cancel` ends, as the real referee's does).
    """

    def __init__(self, candidates: Mapping[str, FakeCandidate], *, specs: DeviceSpecs | None = None,
                 eager_ms: float = 2.0, specs_failures: int = 0, delay_s: float = 0.0) -> None:
        self.candidates = dict(candidates)
        self.delay_s = delay_s
        self.cancelled = threading.Event()
        self.specs = specs or FAKE_SPECS
        self.eager_ms = eager_ms
        self.calls: list[tuple[str, str]] = []
        self._specs_failures = specs_failures
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def evaluate(self, source: str, depth: Depth | str) -> Verdict:
        depth = Depth(depth)
        with self._lock:
            self.calls.append((source, depth.value))
            count = self._seen.get(source, 0)
            self._seen[source] = count + 1
        if self.cancelled.is_set() or (self.delay_s and self.cancelled.wait(self.delay_s)):
            return Verdict(status=Status.ERROR, stage=Stage.PROBLEM, error_kind=ErrorKind.INFRA,
                           message="the evaluation was cancelled", depth=depth)
        candidate = self.candidates.get(source, FakeCandidate(kind="compile_error"))
        if count < candidate.infra_first:
            return make_verdict("infra", depth)
        return make_verdict(candidate.kind, depth, median_ms=candidate.median_ms, eager_ms=self.eager_ms)

    def cancel(self) -> None:
        """Terminal: the evaluation in flight (and every later one) ends with an infra error."""
        self.cancelled.set()

    @property
    def device_specs(self) -> DeviceSpecs:
        with self._lock:
            if self._specs_failures > 0:
                self._specs_failures -= 1
                raise RuntimeError("the reference process failed to start")
        return self.specs
