"""The corpus of honest kernels on CUDA (`pytest -m gpu`, on an H200): the CPU corpus's twin.

tests/harness/corpus/test_corpus_cpu.py runs C++ kernels in the styles LLM-written kernels use;
this runs the same styles with CUDA kernels (``cuda_sources``) from tests/gpu/corpus/: builds at
import, in ``__init__``, on the first forward, in a cached helper, and gated on
``torch.cuda.is_available()`` (False in the compile sandbox, which sees no GPU: the run builds it at
import); try/except around ``load_inline`` (a build that succeeds, one that fails with an nvcc
error); a kernel that raises on odd batches and is caught; renamed parameters; KernelBench's own
``load_inline`` call (torch headers in ``cuda_sources``, default-stream launches). The honest ones
must pass, each failure must be named by its true cause first. One `Referee` serves the corpus; the
candidates share three CUDA extensions (and one CPU one, the gated file's CPU path). Needs only
torch, the standard library and pytest. Figures go to stdout (run with -s) as CORPUS-GPU lines,
and to KERNELLOOP_GPU_REPORT if set.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee, Timeouts, TimingOptions
from problems import load_problem
from problems.spec import Problem, parse_problem
from tests.support.gpu import report
from vocabulary.builds import BuildPhase
from vocabulary.verdict import Stage, Status, Verdict

pytestmark = pytest.mark.gpu

CORPUS = Path(__file__).parent / "corpus"
PROBLEM = "level2/conv_tanh_scale_bias_maxpool"
# Every one of the first ten timed calls audited (as the adversarial suites): no honest kernel may fail one.
QUICK_TIMING = TimingOptions(warmup_ms=10, min_repeats=10, max_repeats=40, max_time_s=0.3, input_sets=2,
                             audits=10)
#: nvcc's error in the corpus's broken extension (kl_corpus_fast_pool_cuda).
BROKEN = 'identifier "blockDimx" is undefined'


def small_seed1() -> Problem:
    """Seed problem 1 with a batch of 16 instead of 128 (the extra shape keeps its batch of 3)."""
    source = load_problem(PROBLEM).source
    assert "batch_size = 128" in source
    return parse_problem(source.replace("batch_size = 128", "batch_size = 16"), problem_id="corpus/seed1_b16",
                         level=2)


@dataclass(frozen=True)
class Case:
    """A corpus file, its style, and what the referee must answer (as in the CPU corpus)."""

    file: str
    style: str
    status: Status = Status.PASS
    stage: Stage = Stage.DONE
    first_line: tuple[str, ...] = ()
    check: Callable[[Verdict], bool] = field(default=lambda verdict: True)


def built(*where: tuple[str, BuildPhase | None]) -> Callable[[Verdict], bool]:
    """Its extensions, by name, and where each was built (None: in the compile sandbox)."""
    def check(verdict: Verdict) -> bool:
        return verdict.compile is not None and [(e.name, e.lazy) for e in verdict.compile.extensions] == list(where)
    return check


def noted(*pairs: str) -> Callable[[Verdict], bool]:
    def check(verdict: Verdict) -> bool:
        return len(verdict.notes) == 1 and all(p in verdict.notes[0] for p in pairs)
    return check


SEED = "kl_seed1_cuda"
FUSED = "fused_tanh_scale_bias_cuda"
CASES = (
    Case("import_time.py", "import", check=built((SEED, None))),
    Case("init_build.py", "lazy: __init__", check=built((SEED, BuildPhase.INIT))),
    Case("first_forward.py", "lazy: first forward", check=built((SEED, BuildPhase.FORWARD))),
    Case("cached_helper.py", "lazy: cached helper", check=built((SEED, BuildPhase.FORWARD))),
    Case("global_cache_helper.py", "lazy: cached helper", check=built((FUSED, BuildPhase.FORWARD))),
    Case("cuda_gated.py", "gated on torch.cuda.is_available()",
         check=built(("kl_seed1_cpu", None), (SEED, BuildPhase.IMPORT))),
    Case("cuda_gated_only.py", "gated on torch.cuda.is_available()", check=built((SEED, BuildPhase.IMPORT))),
    Case("bound_at_import.py", "import", check=built((SEED, None))),
    Case("try_except_import_ok.py", "try/except, build succeeds", check=built((SEED, None))),
    Case("try_except_init_ok.py", "try/except, build succeeds", check=built((FUSED, BuildPhase.INIT))),
    Case("runtime_fallback.py", "run-time fallback",
         first_line=(f"{FUSED}.pool_tanh_scale_bias_pairs raised at run time in trial 3", "batch must be even"),
         check=lambda v: {e.trial for e in v.kernel_errors} == {3}),
    Case("renamed_params.py", "renamed parameters",
         check=noted("conv.weight -> weight", "conv.bias -> conv_bias", "bias -> channel_bias")),
    Case("renamed_lazy_kernelbench.py", "renamed parameters",
         check=lambda v: noted("conv.weight -> w")(v) and built((FUSED, BuildPhase.FORWARD))(v)),
    Case("kernelbench_import.py", "KernelBench's load_inline call", check=built((FUSED, None))),
    Case("renamed_partly.py", "renamed parameters", check=noted("bias -> bias_param")),
    Case("one_build_of_two_fails.py", "try/except, build fails",
         first_line=("extension 'kl_corpus_fast_pool_cuda' failed to build at import", BROKEN)),
    # -- failures: the true cause first ------------------------------------------------------------
    Case("swallowed_build_import.py", "try/except, build fails", Status.FAIL, Stage.INTEGRITY,
         first_line=("extension 'kl_corpus_fast_pool_cuda' failed to build at import", BROKEN),
         check=lambda v: v.flags == ("no_custom_kernel",)),
    Case("swallowed_build_init.py", "try/except, build fails", Status.FAIL, Stage.INTEGRITY,
         first_line=("extension 'kl_corpus_fast_pool_cuda' failed to build in ModelNew.__init__", BROKEN)),
    Case("lazy_build_error.py", "lazy build fails, not caught", Status.ERROR, Stage.COMPILE,
         first_line=("extension 'kl_corpus_fast_pool_cuda' failed to build (built lazily, in forward)",),
         check=lambda v: v.compile is not None and not v.compile.ok and BROKEN in v.compile.errors),
    Case("runtime_always_raises.py", "run-time fallback", Status.FAIL, Stage.INTEGRITY,
         first_line=(f"extension function {SEED}.pool_tanh_scale_bias raised at run time in trial 0",
                     "incompatible function arguments"),
         check=lambda v: v.flags == ("extension_does_no_work",)),
    Case("renamed_wrong_shape.py", "renamed parameters", Status.ERROR, Stage.LOAD,
         first_line=("the reference weights do not fit ModelNew",),
         check=lambda v: "bias (64, 1, 1)" in v.message and "channel_bias (64,)   <- differs" in v.message),
    Case("lazy_refused_flags.py", "lazy build the builder refuses", Status.ERROR, Stage.COMPILE,
         # The corpus file builds the CPU seed on purpose: its flags are the ones the builder refuses.
         first_line=("extension 'kl_seed1_cpu' failed to build (built lazily, in ModelNew.__init__)",),
         check=lambda v: v.compile is not None and "Build this one at import" in v.compile.errors),
)


def test_every_corpus_file_has_a_case() -> None:
    assert sorted(c.file for c in CASES) == sorted(p.name for p in CORPUS.glob("*.py"))


def test_honest_cuda_kernels_pass_and_every_failure_names_its_true_cause(tmp_path_factory: pytest.TempPathFactory,
                                                                         ) -> None:
    kept = os.environ.get("KERNELLOOP_TEST_CACHE")
    cache = Path(kept) if kept else tmp_path_factory.mktemp("gpu-corpus-cache")
    options = HarnessOptions(cache_dir=cache, secret_seed=20261202, trials=2, compile_baseline=False,
                             timing=QUICK_TIMING, memory_limit_mb=8192,
                             timeouts=Timeouts(trial_s=15.0, load_s=120.0, timing_s=120.0, compile_s=600.0))
    wrong: list[str] = []
    verdicts: dict[str, Verdict] = {}
    with Referee(small_seed1(), "cuda", options) as referee:
        for case in CASES:
            verdict = verdicts[case.file] = referee.evaluate((CORPUS / case.file).read_text())
            first = verdict.message.splitlines()[0] if verdict.message else ""
            report({"file": case.file, "style": case.style, "status": verdict.status.value,
                    "stage": verdict.stage.value, "first_line": first[:300],
                    "speedup_vs_eager": verdict.speedup_vs_eager,
                    "compile_s": verdict.compile.seconds if verdict.compile else None}, tag="CORPUS-GPU")
            if (verdict.status, verdict.stage) != (case.status, case.stage):
                wrong.append(f"{case.file}: {verdict.status.value} at {verdict.stage.value} "
                             f"({verdict.message[:1500]!r}; log {verdict.log[-1500:]!r})")
            elif not all(words in first for words in case.first_line):
                wrong.append(f"{case.file}: the first line does not name the cause: {first!r}")
            elif not case.check(verdict):
                wrong.append(f"{case.file}: its own check failed: {verdict.to_dict()}")
    honest = [c for c in CASES if c.status is Status.PASS]
    report({"honest_by_style": dict(Counter(c.style for c in honest)), "honest": len(honest),
            "false_rejections": [c.file for c in honest if verdicts[c.file].status is not Status.PASS],
            "failures": {c.file: verdicts[c.file].message.splitlines()[0] for c in CASES
                         if c.status is not Status.PASS}}, tag="CORPUS-GPU-SUMMARY")
    keys = {(e.name, e.key) for v in verdicts.values() if v.compile for e in v.compile.extensions}
    assert len(keys) <= 3, keys  # kl_seed1_cuda, fused_tanh_scale_bias_cuda, kl_seed1_cpu
    assert wrong == []
