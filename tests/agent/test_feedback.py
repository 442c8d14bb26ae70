"""Feedback text from verdicts, the device summary, and history summaries."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent.feedback import gpu_summary, verdict_feedback
from tests.support.doubles import make_verdict
from tests.support.doubles.fakes import FAKE_SPECS
from vocabulary.builds import BuildFailure, BuildPhase, CompileResult, ExtensionBuild, KernelInfo
from vocabulary.causes import KernelError
from vocabulary.devices import DeviceSpecs
from vocabulary.provenance import Provenance
from vocabulary.verdict import ProfileRow, Stage, Status, Trial, Verdict


def test_compile_error_shows_file_line_and_what_main_cpp_is() -> None:
    text = verdict_feedback("compile", make_verdict("compile_error", "compile"))
    assert text.startswith("compile: ERROR (stage compile)")
    assert "main.cpp:20:15: error: 'outt' was not declared" in text
    assert "load_inline writes cpp_sources to main.cpp" in text


def test_long_compiler_output_is_trimmed() -> None:
    errors = "main.cpp:1:1: error: x\n" + "context line\n" * 2000
    verdict = Verdict(status=Status.ERROR, stage=Stage.COMPILE, message="compile failed",
                      compile=CompileResult(ok=False, seconds=1.0, errors=errors))
    text = verdict_feedback("compile", verdict)
    assert len(text) < 3500 and "[... trimmed]" in text


def test_wrong_output_names_failing_trials_with_errors_and_a_diagnosis() -> None:
    text = verdict_feedback("check_correctness", make_verdict("wrong", "correctness"))
    assert "check_correctness: FAIL (stage correctness)" in text
    assert "0/5 trials pass" in text and "atol = rtol = 1e-4" in text
    assert "trial 0 (random inputs): FAIL: max abs err 0.38, mean abs err 0.05, 98.5% of elements" in text
    assert "trial 3 (variant inputs" in text and "trial 4 (extra shape 0)" in text
    assert "systematic error" in text


def test_only_extra_shape_failing_is_diagnosed_as_a_size_assumption() -> None:
    text = verdict_feedback("check_correctness", make_verdict("shape_only", "correctness"))
    assert "1/5 trials pass" not in text and "4/5 trials pass" in text
    assert "trial 4 (extra shape 0): FAIL" in text and "passing: trial 0" in text
    assert "only the extra-shape trials fail" in text


def test_uncomparable_outputs_report_the_message_once_with_their_own_diagnosis() -> None:
    trials = tuple(Trial(seed_index=i, passed=False, max_abs_err=None, mean_abs_err=None, mismatch_frac=1.0,
                         message="shape (2, 16, 8, 8), expected (2, 16, 7, 7)") for i in range(3))
    verdict = Verdict(status=Status.FAIL, stage=Stage.CORRECTNESS, message="3 of 3 trials failed", trials=trials)
    text = verdict_feedback("check_correctness", verdict)
    assert "every failing trial (0, 1, 2): shape (2, 16, 8, 8), expected (2, 16, 7, 7)" in text
    assert text.count("expected (2, 16, 7, 7)") == 1
    assert "no output could be compared" in text and "systematic" not in text


def test_benchmark_reports_time_speedups_sol_registers_and_progress() -> None:
    text = verdict_feedback("benchmark", make_verdict("pass", "benchmark", median_ms=1.0), best_ms=5.0)
    assert "time: 1.000 ms median" in text
    assert "vs eager PyTorch 2.000 ms: 2.00x faster" in text and "vs torch.compile 1.500 ms: 1.50x faster" in text
    assert "speed-of-light 250.0 us" in text and "25% of SOL" in text
    assert "fake_kernel: 32 registers, no spills" in text  # demangled
    assert "new best of this session (previous 5.000 ms)" in text


def test_spills_flags_hints_and_quarantine_are_explained() -> None:
    verdict = make_verdict("suspicious", "benchmark").with_changes(
        compile=CompileResult(ok=True, seconds=1.0, kernels=(KernelInfo(kernel="k", registers=255, spill_stores=64,
                                                                        spill_loads=64),)),
        hints=("no __global__ function: the candidate defines no CUDA kernel of its own",))
    text = verdict_feedback("benchmark", verdict)
    assert "k: 255 registers, up to 64 B spill stores / 64 B spill loads (SPILLS" in text
    assert "flag speedup_over_limit: the speedup over eager is above the quarantine limit" in text
    assert "hint: no __global__ function" in text
    assert "QUARANTINED" in text


def test_integrity_failure_flag_meaning() -> None:
    verdict = Verdict(status=Status.FAIL, stage=Stage.INTEGRITY, message="its extension does no real work",
                      trials=make_verdict("pass", "correctness").trials, flags=("extension_does_no_work",))
    text = verdict_feedback("check_correctness", verdict)
    assert "flag extension_does_no_work: replacing your extension's functions with no-ops" in text


def test_load_error_explains_what_loading_is() -> None:
    text = verdict_feedback("check_correctness", make_verdict("load_error", "correctness"))
    assert "the reference weights do not fit ModelNew" in text
    assert "   4  bn.running_mean (16,)      -   <- missing" in text
    assert "loading the reference state_dict into it" in text


def test_profile_table_with_shares() -> None:
    text = verdict_feedback("profile", make_verdict("pass", "profile", median_ms=1.0))
    assert "profile (GPU kernel time per forward" in text
    assert "70.0%" in text and "cudnn::conv_fwd" in text and "fake_kernel" in text


def test_cuda_profile_separates_kernels_from_inclusive_torch_ops() -> None:
    rows = tuple(ProfileRow.from_dict(r) for r in (
            {"name": "aten::conv2d", "calls": 1, "ms_per_forward": 4.79},
            {"name": "sm80_xmma_fprop_implicit_gemm_f32f32", "calls": 1, "ms_per_forward": 2.63},
            {"name": "void at::native::elementwise_kernel<128, 2>", "calls": 1, "ms_per_forward": 1.64},
            {"name": "cudaLaunchKernel", "calls": 2, "ms_per_forward": 0.53},
            {"name": "void pool_tanh_scale_bias_kernel<4, 2, unsigned int>", "calls": 1, "ms_per_forward": 0.51}))
    text = verdict_feedback("profile", make_verdict("pass", "profile").with_changes(profile=rows))
    kernel_table = text.split("torch ops")[0]
    assert "aten::conv2d" not in kernel_table and "cudaLaunchKernel" not in kernel_table
    assert "55.0%" in kernel_table and "pool_tanh_scale_bias_kernel" in kernel_table
    assert "torch ops, inclusive of their kernels: aten::conv2d 4.79 ms" in text
    cpu = make_verdict("pass", "profile").with_changes(provenance=Provenance(target="cpu"), profile=rows[:1])
    assert "self CPU time" in verdict_feedback("profile", cpu)


def test_template_instantiations_are_grouped() -> None:
    kernels = tuple(KernelInfo(kernel=f"_Z6kernelILi{i}EEvPf", registers=30 + i, spill_stores=0, spill_loads=0)
                    for i in range(3))
    verdict = make_verdict("pass", "compile").with_changes(compile=CompileResult(ok=True, seconds=1.0, kernels=kernels))
    assert "kernel (3 instantiations): 30-32 registers, no spills" in verdict_feedback("compile", verdict)


def test_reused_verdict_says_so() -> None:
    text = verdict_feedback("submit", make_verdict("pass", "benchmark"), reused_from="benchmark")
    assert "identical source to an earlier benchmark call" in text


def test_gpu_summary_has_the_ridge_point() -> None:
    text = gpu_summary(FAKE_SPECS)
    assert "NVIDIA H200" in text and "132 SMs" in text and "4200 GB/s" in text
    assert "ridge point: 16.0 FLOP/byte" in text
    cpu = gpu_summary(DeviceSpecs(target="cpu", name="x86_64", cores=2, peak_flops={"fp32": 4.9e10},
                                  measured_bandwidth=1.1e10, peak_source="measured"))
    assert "2 cores" in cpu and "ridge point: 4.5 FLOP/byte" in cpu


def _compiled(*extensions: dict[str, Any]) -> Verdict:
    return make_verdict("pass", "compile").with_changes(
        compile=CompileResult(ok=True, seconds=30.0, extensions=tuple(
            ExtensionBuild.from_dict({**e, "units": [{"key": "k", **u} for u in e.get("units", [])]})
            for e in extensions)))


def test_a_single_cu_with_torch_headers_is_told_what_it_cost_and_how_to_split() -> None:
    ext = {"name": "ext", "key": "k", "cached": False, "seconds": 60.0, "via": "builder",
           "pch": {"status": "used"},
           "units": [{"source": "main.cpp", "reused": True, "seconds": 0.0},
                     {"source": "cuda.cu", "reused": False, "seconds": 58.2, "torch_headers": True}]}
    text = verdict_feedback("compile", _compiled(ext), compile_s_total=95.0, compiles=2)
    assert "main.cpp reused from an earlier build" in text and "cuda.cu 58.2 s" in text
    assert "cuda.cu includes torch headers" in text and "no_implicit_headers=True" in text
    assert "compile time so far in this session: 95 s over 2 compiles" in text


def test_a_missed_precompiled_header_says_why_and_a_split_build_says_what_to_keep() -> None:
    ext = {"name": "ext", "key": "k", "cached": False, "seconds": 40.0, "via": "builder",
           "pch": {"status": "missing", "reason": "no precompiled torch header for binding flags -Os"},
           "units": [{"source": "main.cpp", "reused": False, "seconds": 35.0, "torch_headers": True},
                     {"source": "cuda.cu", "reused": False, "seconds": 2.0, "torch_headers": False}]}
    text = verdict_feedback("compile", _compiled(ext))
    assert "the binding parsed torch/extension.h itself (no precompiled torch header for binding flags -Os)" in text
    assert "keep cpp_sources, the extension's name and its flags unchanged" in text
    assert "cuda.cu includes torch headers" not in text and "compile time so far" not in text


def test_a_build_the_builder_refused_says_why_it_reused_nothing() -> None:
    ext = {"name": "ext", "key": "k", "cached": False, "seconds": 40.0, "via": "stage",
           "builder_refusal": "flag '-I/opt/include'"}
    assert "because of flag '-I/opt/include'" in verdict_feedback("compile", _compiled(ext))


def test_the_compile_budget_counts_fresh_compiles_only() -> None:
    from agent.tools import Ledger

    ledger = Ledger()
    ledger.charge_compile(_compiled({"name": "ext", "key": "k", "cached": False}))
    ledger.charge_compile(make_verdict("pass", "compile").with_changes(
        compile=CompileResult(ok=True, seconds=0.0)))  # memoised: no compile
    assert (ledger.compile_s, ledger.compiles) == (30.0, 1)


def test_a_compile_error_without_compiler_text_says_so_instead_of_an_empty_heading() -> None:
    verdict = Verdict(status=Status.ERROR, stage=Stage.COMPILE, message="",
                      compile=CompileResult(ok=False, seconds=1.0))
    text = verdict_feedback("compile", verdict)
    assert "first compiler errors:" not in text
    assert "the compiler printed no error text" in text


def test_a_failure_the_candidate_caught_comes_first_with_the_compilers_errors() -> None:
    errors = "main.cpp:11:15: error: 'output' was not declared in this scope\n   11 |   float* op = output.data_ptr();"
    verdict = Verdict(
        status=Status.FAIL, stage=Stage.INTEGRITY, flags=("no_custom_kernel",),
        message="extension 'kl_fast' failed to build in ModelNew.__init__ and the candidate caught the error "
                "(falling back without it): main.cpp:11:15: error: 'output' was not declared in this scope\n"
                "the candidate built no extension: no custom kernel ran",
        compile=CompileResult(ok=True, seconds=4.0, swallowed=(
            BuildFailure(name="kl_fast", errors=errors, lazy=BuildPhase.INIT),)),
        trials=make_verdict("pass", "correctness").trials,
        kernel_errors=(KernelError(function="kl_ext.f", error="RuntimeError: odd batch", trial=3),),
        notes=("ModelNew names its parameters ... loaded by registration order: conv.weight -> w",))
    lines = verdict_feedback("check_correctness", verdict).splitlines()
    assert lines[0].startswith("check_correctness: FAIL (stage integrity) - extension 'kl_fast' failed to build")
    assert lines[1] == ("YOUR BUILD FAILED: load_inline of 'kl_fast' (in ModelNew.__init__) raised and your code "
                        "caught it, so your kernel never ran; first compiler errors:")
    assert lines[2:4] == errors.splitlines()
    assert lines[4] == ("YOUR KERNEL RAISED: kl_ext.f raised in trial 3 and your code caught it (forward went on "
                        "without it): RuntimeError: odd batch")
    assert lines[5].startswith("(a kernel must fail loudly") and lines[6].startswith("note: ModelNew names")


def test_a_lazy_build_says_where_it_was_built() -> None:
    verdict = make_verdict("pass", "benchmark")
    assert verdict.compile is not None
    lazy = replace(verdict.compile.extensions[0], lazy=BuildPhase.FORWARD, cached=False)
    text = verdict_feedback("benchmark", replace(verdict, compile=replace(verdict.compile, extensions=(lazy,))))
    assert f"build: {lazy.name} (built, lazily in forward)" in text
