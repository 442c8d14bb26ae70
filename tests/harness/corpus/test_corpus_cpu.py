"""The corpus of honest kernels on the CPU target: the styles models write, through one referee.

Each file of this folder is a candidate for seed problem 1 in one style LLM-written kernels use:
builds at import, in ``__init__``, on the first forward, in a cached helper, gated on
``torch.cuda.is_available()``; try/except around ``load_inline`` (a build that succeeds, one that
fails); a kernel that raises on some shapes and is caught; parameters renamed but created in the
reference's order; KernelBench's own ``load_inline`` call. The honest ones must pass (no false
rejection); each failure must be named by its true cause, first in the message. Candidates share
their extensions byte for byte (two builds serve every honest one), and one `Referee` (one
reference process) serves them all. Figures go to stdout (run with -s) as CORPUS lines.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness import Referee
from problems import load_problem
from tests.support.integrity import make_options
from vocabulary.builds import BuildPhase
from vocabulary.verdict import Stage, Status, Verdict

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).parent
PROBLEM = "level2/conv_tanh_scale_bias_maxpool"
#: The compiler's error in the corpus's broken extension (g++ quotes the name with the locale's quotes).
BROKEN = "was not declared in this scope"


@dataclass(frozen=True)
class Case:
    """A corpus file, its style, and what the referee must answer: ``status`` and ``stage``, words
    of the message's first line (the true cause), and a check of its own."""

    file: str
    style: str
    status: Status = Status.PASS
    stage: Stage = Stage.DONE
    first_line: tuple[str, ...] = ()
    check: Callable[[Verdict], bool] = field(default=lambda verdict: True)

    @property
    def honest(self) -> bool:
        return self.status is Status.PASS


def lazy(phase: BuildPhase | None) -> Callable[[Verdict], bool]:
    """Its extensions were built where the style builds them (None: in the compile sandbox)."""
    def check(verdict: Verdict) -> bool:
        return verdict.compile is not None and [e.lazy for e in verdict.compile.extensions] == [phase]
    return check


def noted(*pairs: str) -> Callable[[Verdict], bool]:
    def check(verdict: Verdict) -> bool:
        return len(verdict.notes) == 1 and "registration order" in verdict.notes[0] and all(
            p in verdict.notes[0] for p in pairs)
    return check


CASES = (
    Case("import_time.py", "import", check=lazy(None)),
    Case("init_build.py", "lazy: __init__", check=lazy(BuildPhase.INIT)),
    Case("first_forward.py", "lazy: first forward", check=lazy(BuildPhase.FORWARD)),
    Case("cached_helper.py", "lazy: cached helper", check=lazy(BuildPhase.FORWARD)),
    Case("global_cache_helper.py", "lazy: cached helper", check=lazy(BuildPhase.FORWARD)),
    Case("cuda_gated.py", "gated on torch.cuda.is_available()", check=lazy(None)),
    Case("gated_on_the_run.py", "gated on what only the run has", check=lazy(BuildPhase.IMPORT)),
    Case("bound_at_import.py", "import", check=lazy(None)),
    Case("try_except_import_ok.py", "try/except, build succeeds",
         check=lambda v: lazy(None)(v) and not v.compile.swallowed),  # type: ignore[union-attr]
    Case("try_except_init_ok.py", "try/except, build succeeds", check=lazy(BuildPhase.INIT)),
    Case("runtime_fallback.py", "run-time fallback",
         first_line=("fused_tanh_scale_bias.pool_tanh_scale_bias_pairs raised at run time in trial 3",
                     "batch must be even"),
         check=lambda v: {e.trial for e in v.kernel_errors} == {3}),
    Case("renamed_params.py", "renamed parameters",
         check=noted("conv.weight -> weight", "conv.bias -> conv_bias", "bias -> channel_bias")),
    Case("renamed_lazy_kernelbench.py", "renamed parameters",
         check=lambda v: noted("conv.weight -> w")(v) and lazy(BuildPhase.FORWARD)(v)),
    Case("kernelbench_import.py", "KernelBench's load_inline call", check=lazy(None)),
    Case("renamed_partly.py", "renamed parameters",
         check=lambda v: noted("bias -> bias_param")(v) and "conv.weight ->" not in v.notes[0]),
    Case("one_build_of_two_fails.py", "try/except, build fails",
         first_line=("extension 'kl_corpus_fast_pool' failed to build at import", BROKEN),
         check=lambda v: v.log.startswith("extension 'kl_corpus_fast_pool' (at import), first compiler errors:")),
    # -- failures: the true cause first ------------------------------------------------------------
    Case("swallowed_build_import.py", "try/except, build fails", Status.FAIL, Stage.INTEGRITY,
         first_line=("extension 'kl_corpus_fast_pool' failed to build at import and the candidate caught", BROKEN),
         check=lambda v: v.flags == ("no_custom_kernel",) and BROKEN in v.log.splitlines()[1]),
    Case("swallowed_build_init.py", "try/except, build fails", Status.FAIL, Stage.INTEGRITY,
         first_line=("extension 'kl_corpus_fast_pool' failed to build in ModelNew.__init__", BROKEN),
         check=lambda v: v.compile is not None and [f.lazy for f in v.compile.swallowed] == [BuildPhase.INIT]),
    Case("lazy_build_error.py", "lazy build fails, not caught", Status.ERROR, Stage.COMPILE,
         first_line=("extension 'kl_corpus_fast_pool' failed to build (built lazily, in forward)",),
         check=lambda v: v.compile is not None and not v.compile.ok and BROKEN in v.compile.errors
         and BROKEN in v.log),
    Case("runtime_always_raises.py", "run-time fallback", Status.FAIL, Stage.INTEGRITY,
         first_line=("extension function kl_seed1_cpu.pool_tanh_scale_bias raised at run time in trial 0",
                     "incompatible function arguments"),
         check=lambda v: v.flags == ("extension_does_no_work",)),
    Case("renamed_wrong_shape.py", "renamed parameters", Status.ERROR, Stage.LOAD,
         first_line=("the reference weights do not fit ModelNew",),
         check=lambda v: "bias (16, 1, 1)" in v.message and "channel_bias (16,)   <- differs" in v.message),
    Case("lazy_refused_flags.py", "lazy build the builder refuses", Status.ERROR, Stage.COMPILE,
         first_line=("extension 'kl_seed1_cpu' failed to build (built lazily, in ModelNew.__init__)",),
         check=lambda v: v.compile is not None and "extra_include_paths" in v.compile.errors
         and "Build this one at import" in v.compile.errors),
)


def test_every_corpus_file_has_a_case() -> None:
    assert sorted(c.file for c in CASES) == sorted(p.name for p in CORPUS.glob("*.py") if p.name != Path(__file__).name)


def test_honest_kernels_pass_and_every_failure_names_its_true_cause(harness_cache: Path) -> None:
    """One referee for the whole corpus; every mismatch is listed at the end, with the figures."""
    wrong: list[str] = []
    verdicts: dict[str, Verdict] = {}
    with Referee(load_problem(PROBLEM), "cpu", make_options(harness_cache)) as referee:
        for case in CASES:
            verdict = verdicts[case.file] = referee.evaluate((CORPUS / case.file).read_text())
            first = verdict.message.splitlines()[0] if verdict.message else ""
            print("CORPUS", json.dumps({"file": case.file, "style": case.style, "status": verdict.status.value,
                                        "stage": verdict.stage.value, "first_line": first[:300],
                                        "compile_s": verdict.compile.seconds if verdict.compile else None}))
            if (verdict.status, verdict.stage) != (case.status, case.stage):
                wrong.append(f"{case.file}: {verdict.status.value} at {verdict.stage.value} "
                             f"({verdict.message[:1500]!r}; log {verdict.log[-1500:]!r})")
            elif not all(words in first for words in case.first_line):
                wrong.append(f"{case.file}: the first line does not name the cause: {first!r}")
            elif not case.check(verdict):
                wrong.append(f"{case.file}: its own check failed: {verdict.to_dict()}")
    honest = [c for c in CASES if c.honest]
    rejected = [c.file for c in honest if verdicts[c.file].status is not Status.PASS]
    print("CORPUS-SUMMARY", json.dumps({
        "honest_by_style": Counter(c.style for c in honest), "honest": len(honest), "false_rejections": rejected,
        "failures": {c.file: verdicts[c.file].message.splitlines()[0] for c in CASES if not c.honest}}))
    # Byte-identical sources: the honest corpus needs two builds (the broken one never builds).
    keys = {(e.name, e.key) for v in verdicts.values() if v.compile for e in v.compile.extensions}
    assert len(keys) <= 2, keys
    assert wrong == []
