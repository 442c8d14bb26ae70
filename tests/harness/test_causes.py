"""The true cause first: builds the candidate caught and kernels that raised lead a verdict's message
and log, whatever failed later, and survive the quarantine."""

from __future__ import annotations

from harness.assembly import VerdictFacts, assemble, quarantine
from harness.draft import Draft, Outcome
from vocabulary.builds import BuildFailure, BuildPhase, CompileResult
from vocabulary.causes import KernelError, cause_lines, cause_log, led_by_cause
from vocabulary.evaluation import Depth, Target
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import Stage, Status

BROKEN = BuildFailure(name="kl_fast", errors="main.cpp:11:15: error: 'output' was not declared in this scope\n"
                      "   11 |   float* op = output.data_ptr<float>();", lazy=None)
FACTS = VerdictFacts(target=Target.CPU, problem_sha256="ab" * 32, mode="train", policy="mixed", atol=None, rtol=None,
                     trials=2, seeds="s", rejudge=False, transport="file", reference=None, python="3.11",
                     host="h", pid=1, output_limit=400)


def test_nothing_hidden_changes_nothing() -> None:
    assert cause_lines(CompileResult(ok=True, seconds=1.0), ()) == []
    assert led_by_cause("correct and timed", None, ()) == "correct and timed"
    assert cause_log(None, ()) == ""


def test_each_hidden_failure_is_one_line_builds_first_and_a_kernel_once_for_all_its_trials() -> None:
    compiled = CompileResult(ok=True, seconds=1.0, swallowed=(
        BROKEN, BuildFailure(name="kl_late", errors="ld: cannot find -lfoo", lazy=BuildPhase.INIT)))
    raised = (KernelError(function="kl_ext.f", error="TypeError: f(): incompatible function arguments.\n"
                          "Invoked with: tensor([1.])", trial=0),
              KernelError(function="kl_ext.f", error="TypeError: f(): incompatible function arguments.\n"
                          "Invoked with: tensor([2.])", trial=1),
              KernelError(function="kl_ext.f", error="TypeError: f(): incompatible function arguments.", trial=0,
                          noop=True))
    assert led_by_cause("the candidate built no extension", compiled, raised).splitlines() == [
        "extension 'kl_fast' failed to build at import and the candidate caught the error (falling back without "
        "it): main.cpp:11:15: error: 'output' was not declared in this scope",
        "extension 'kl_late' failed to build in ModelNew.__init__ and the candidate caught the error (falling back "
        "without it): ld: cannot find -lfoo",
        "extension function kl_ext.f raised at run time in trial 0, trial 1, the no-op substitution trial and "
        "forward went on without it (the candidate caught the error): TypeError: f(): incompatible function "
        "arguments.",
        "the candidate built no extension"]
    log = cause_log(compiled, raised)
    assert log.startswith("extension 'kl_fast' (at import), first compiler errors:\nmain.cpp:11:15: error:")
    assert "   11 |   float* op = output.data_ptr<float>();" in log and "kl_ext.f raised in trial 0" in log


def test_the_cause_leads_the_message_and_the_log_of_any_outcome_and_survives_the_quarantine() -> None:
    draft = Draft(depth=Depth.BENCHMARK, compile=CompileResult(ok=True, seconds=1.0, swallowed=(BROKEN,)),
                  baselines=Baselines(eager=Timing.from_samples([100.0], clock="perf_counter"), torch_compile=None),
                  timing=Timing.from_samples([1.0], clock="perf_counter"))
    failed = assemble(FACTS, draft, Outcome(Status.FAIL, Stage.INTEGRITY, "no custom kernel ran"), log="x" * 5000)
    assert failed.message.splitlines()[0].startswith("extension 'kl_fast' failed to build at import")
    assert failed.message.splitlines()[1] == "no custom kernel ran"
    assert failed.log.startswith("extension 'kl_fast' (at import), first compiler errors:\nmain.cpp:11:15")
    assert len(failed.log) <= FACTS.output_limit and failed.log.endswith("xxx")  # then the sandbox's tail
    passed = assemble(FACTS, draft, Outcome(Status.PASS, Stage.DONE, "correct and timed"))
    suspicious = quarantine(passed, 10.0)  # 100x faster than eager
    assert suspicious.status is Status.SUSPICIOUS
    assert suspicious.message.splitlines()[0].startswith("extension 'kl_fast' failed to build at import")
    assert suspicious.message.splitlines()[1].startswith("quarantined: ")
