import json
from dataclasses import replace
from typing import Any

import pytest

from vocabulary.builds import BuildFailure, BuildPhase, CompileResult, ExtensionBuild, HeaderUse, KernelInfo, UnitBuild
from vocabulary.causes import KernelError
from vocabulary.provenance import Provenance, Tolerance
from vocabulary.stages import StageSeconds
from vocabulary.timing import Baselines, ClockBound, Timing
from vocabulary.verdict import ErrorKind, ProfileRow, Stage, Status, Trial, Verdict
from vocabulary.wire import WireError


def test_timing_statistics_are_derived_from_raw_samples() -> None:
    t = Timing.from_samples([1.0, 2.0, 3.0, 4.0, 100.0], clock="perf_counter")
    assert t.n == 5
    assert t.median_ms == 3.0
    assert t.iqr_ms == pytest.approx(52.0 - 1.5)  # exclusive quartiles of 5 samples
    assert Timing.from_dict(t.to_dict()) == t


def test_verdict_json_round_trip_and_derived_figures() -> None:
    verdict = Verdict(
        status=Status.PASS, stage=Stage.DONE,
        compile=CompileResult(ok=True, seconds=1.5, extensions=(ExtensionBuild(name="x", key="k", cached=True),)),
        trials=(Trial(0, True, 1e-7, 1e-8, 0.0),),
        timing=Timing.from_samples([2.0, 2.0, 2.0], clock="cuda_events"),
        baselines=Baselines(eager=Timing.from_samples([4.0], clock="cuda_events"),
                            torch_compile=Timing.from_samples([3.0], clock="cuda_events")),
        sol_ms=0.5,
    )
    data = json.loads(json.dumps(verdict.to_dict()))
    assert data["speedup_vs_eager"] == 2.0
    assert data["speedup_vs_compile"] == 1.5
    assert data["pct_of_sol"] == 25.0
    assert data["compiled"] is True and data["correct"] is True and data["compile_s"] == 1.5
    assert data["timing"]["median_ms"] == 2.0 and data["timing"]["n"] == 3
    assert data["baselines"]["eager_ms"] == 4.0 and data["baselines"]["torch_compile_ms"] == 3.0
    assert Verdict.from_dict(data) == verdict


def test_error_verdict_has_nulls_where_stages_did_not_run() -> None:
    data = Verdict(status=Status.ERROR, stage=Stage.COMPILE, error_kind=ErrorKind.CANDIDATE).to_dict()
    for key in ("timing", "baselines", "speedup_vs_eager", "speedup_vs_compile", "sol_ms", "pct_of_sol", "compile_s"):
        assert data[key] is None, key
    assert data["correct"] is False and data["compiled"] is False
    assert data["error_kind"] == "candidate"


def test_trial_with_infinite_error_serialises_as_null() -> None:
    data = Trial(1, False, float("inf"), float("nan"), 1.0).to_dict()
    assert data["max_abs_err"] is None and data["mean_abs_err"] is None
    json.dumps(data, allow_nan=False)


#: A fully populated verdict's JSON, as ``Verdict.to_dict()`` wrote it before its parts were typed
#: (extensions, kernels, provenance and profile rows as dicts): the shape stored with every
#: attempt, served by the API and parsed by the CLI. It must not change.
FULL_VERDICT_JSON: dict[str, Any] = {'status': 'suspicious',
 'stage': 'done',
 'error_kind': None,
 'compiled': True,
 'compile_s': 42.0,
 'correct': True,
 'trials': [{'seed_index': 0,
             'passed': True,
             'max_abs_err': 1e-07,
             'mean_abs_err': 1e-08,
             'mismatch_frac': 0.0,
             'kind': 'random',
             'message': ''},
            {'seed_index': 1,
             'passed': True,
             'max_abs_err': None,
             'mean_abs_err': None,
             'mismatch_frac': 0.0,
             'kind': 'variant',
             'message': 'm'},
            {'seed_index': 2,
             'passed': True,
             'max_abs_err': 2e-07,
             'mean_abs_err': 1e-08,
             'mismatch_frac': 0.0,
             'kind': 'shape:0',
             'message': ''}],
 'timing': {'median_ms': 3.0,
            'iqr_ms': 3.0,
            'mean_ms': 3.0,
            'n': 5,
            'clock': 'cuda_events',
            'warnings': ['noisy: x'],
            'samples_ms': [1.0, 2.0, 3.0, 4.0, 5.0],
            'trusted_clock': {'overhead_ms': 0.05, 'excess_ms': 0.01, 'allowed_ms': 0.15, 'calls': 5,
                              'audits': 2}},
 'baselines': {'eager_ms': 20.5,
               'torch_compile_ms': None,
               'eager': {'median_ms': 20.5,
                         'iqr_ms': 1.0,
                         'mean_ms': 20.5,
                         'n': 2,
                         'clock': 'cuda_events',
                         'warnings': [],
                         'samples_ms': [20.0, 21.0],
                         'trusted_clock': None},
               'torch_compile': None,
               'notes': ['torch.compile failed: E']},
 'speedup_vs_eager': 6.833333333333333,
 'speedup_vs_compile': None,
 'sol_ms': 0.25,
 'pct_of_sol': 8.333333333333334,
 'flops': 1000000000.0,
 'min_bytes': 300000000.0,
 'flags': ['speedup_over_limit'],
 'hints': ['a hint'],
 'message': 'quarantined: x',
 'log': 'the log',
 'compile': {'ok': True,
             'seconds': 42.0,
             'extensions': [{'name': 'kl_ext',
                             'key': '0123456789abcdef01234567',
                             'cached': False,
                             'seconds': 41.5,
                             'pch': {'key': 'fedcba9876543210fedcba98',
                                     'status': 'used',
                                     'seconds': 0.0,
                                     'flags': ['-O1']},
                             'via': 'builder',
                             'units': [{'source': 'main.cpp',
                                        'key': 'aaaaaaaaaaaaaaaaaaaaaaaa',
                                        'reused': True,
                                        'seconds': 0.0,
                                        'torch_headers': True,
                                        'first_seconds': 30.5},
                                       {'source': 'cuda.cu',
                                        'key': 'bbbbbbbbbbbbbbbbbbbbbbbb',
                                        'reused': False,
                                        'seconds': 11.0,
                                        'torch_headers': False,
                                        'kept': 'stored'}],
                             'lazy': '__init__'},
                            {'name': 'kl_other',
                             'key': 'cccccccccccccccccccccccc',
                             'cached': True,
                             'seconds': 0.0,
                             'pch': {'status': 'missing',
                                     'key': 'dddddddddddddddddddddddd',
                                     'seconds': 0.0,
                                     'flags': [],
                                     'reason': 'no precompiled torch header for binding flags none'},
                             'via': 'stage',
                             'builder_refusal': "argument 'build_directory'"}],
             'kernels': [{'kernel': '_Z6kernelPf',
                          'arch': 'sm_90a',
                          'stack_bytes': 8,
                          'spill_stores': 4,
                          'spill_loads': 4,
                          'registers': 40,
                          'smem_bytes': 4096},
                         {'kernel': '_Z4tinyv'}],
             'errors': '',
             'swallowed': [{'name': 'kl_fallback', 'errors': "main.cpp:3:1: error: 'x' was not declared",
                            'lazy': 'forward'},
                           {'name': 'kl_first', 'errors': 'ld: cannot find -lfoo'}]},
 'provenance': {'target': 'cuda',
                'device': 'NVIDIA H200',
                'driver': '580.1',
                'torch': '2.11.0',
                'cuda': '13.0',
                'cudnn': 91000,
                'python': '3.12.3',
                'harness': '0.1.0',
                'problem_sha256': 'abababababababababababababababababababababababababababababababab',
                'mode': 'train',
                'policy': 'mixed',
                'tolerance': {'atol': None, 'rtol': 0.001, 'default': 'per dtype: fp32 1e-4, fp16/bf16 1e-2'},
                'trials': 4,
                'seeds': '0123456789abcdef',
                'compile_mode': 'default',
                'timing_mode': 'adaptive',
                'sandbox': ['user', 'mount', 'net'],
                'transport': 'file',
                'host': 'gpu-1',
                'pid': 4242},
 'depth': 'benchmark',
 'profile': [{'name': 'k1', 'calls': 1, 'ms_per_forward': 0.5},
             {'name': 'k2', 'calls': 2, 'ms_per_forward': 0.25}],
 'kernel_errors': [{'function': 'kl_ext.fused', 'error': 'RuntimeError: batch must be even', 'noop': False,
                    'trial': 2}],
 'notes': ['weights loaded by registration order'],
 'stage_seconds': {'compile': 41.5, 'load': 0.3, 'correctness': 1.5, 'timing': 1.25}}


def _full_verdict() -> Verdict:
    return Verdict(
        status=Status.SUSPICIOUS, stage=Stage.DONE, message="quarantined: x",
        compile=CompileResult(ok=True, seconds=42.0, extensions=(
            ExtensionBuild(name="kl_ext", key="0123456789abcdef01234567", cached=False, seconds=41.5,
                           pch=HeaderUse(key="fedcba9876543210fedcba98", status="used", seconds=0.0, flags=("-O1",)),
                           via="builder", units=(
                               UnitBuild(source="main.cpp", key="a" * 24, reused=True, seconds=0.0, torch_headers=True,
                                         first_seconds=30.5),
                               UnitBuild(source="cuda.cu", key="b" * 24, reused=False, seconds=11.0,
                                         torch_headers=False, kept="stored")), lazy=BuildPhase.INIT),
            ExtensionBuild(name="kl_other", key="c" * 24, cached=True, seconds=0.0,
                           pch=HeaderUse(status="missing", key="d" * 24, seconds=0.0, flags=(),
                                         reason="no precompiled torch header for binding flags none"),
                           via="stage", builder_refusal="argument 'build_directory'")),
            kernels=(KernelInfo(kernel="_Z6kernelPf", arch="sm_90a", stack_bytes=8, spill_stores=4, spill_loads=4,
                                registers=40, smem_bytes=4096), KernelInfo(kernel="_Z4tinyv")),
            swallowed=(BuildFailure(name="kl_fallback", errors="main.cpp:3:1: error: 'x' was not declared",
                                    lazy=BuildPhase.FORWARD),
                       BuildFailure(name="kl_first", errors="ld: cannot find -lfoo"))),
        trials=(Trial(0, True, 1e-7, 1e-8, 0.0), Trial(1, True, None, None, 0.0, kind="variant", message="m"),
                Trial(2, True, 2e-7, 1e-8, 0.0, kind="shape:0")),
        timing=replace(Timing.from_samples([1.0, 2.0, 3.0, 4.0, 5.0], clock="cuda_events", warnings=["noisy: x"]),
                       bound=ClockBound(overhead_ms=0.05, excess_ms=0.01, allowed_ms=0.15, calls=5, audits=2)),
        baselines=Baselines(eager=Timing.from_samples([20.0, 21.0], clock="cuda_events"), torch_compile=None,
                            notes=("torch.compile failed: E",)),
        sol_ms=0.25, flops=1e9, min_bytes=3e8, flags=("speedup_over_limit",), hints=("a hint",), log="the log",
        provenance=Provenance(
            target="cuda", device="NVIDIA H200", driver="580.1", torch="2.11.0", cuda="13.0", cudnn=91000,
            python="3.12.3", harness="0.1.0", problem_sha256="ab" * 32, mode="train", policy="mixed",
            tolerance=Tolerance(atol=None, rtol=0.001), trials=4, seeds="0123456789abcdef", compile_mode="default",
            timing_mode="adaptive", sandbox=("user", "mount", "net"), transport="file", host="gpu-1", pid=4242),
        depth="benchmark",
        profile=(ProfileRow(name="k1", calls=1, ms_per_forward=0.5),
                 ProfileRow(name="k2", calls=2, ms_per_forward=0.25)),
        kernel_errors=(KernelError(function="kl_ext.fused", error="RuntimeError: batch must be even", trial=2),),
        notes=("weights loaded by registration order",),
        stage_seconds=StageSeconds(compile=41.5, load=0.3, correctness=1.5, timing=1.25),
    )


def test_a_fully_populated_verdict_keeps_its_json_shape_both_ways() -> None:
    verdict = _full_verdict()
    assert verdict.to_dict() == FULL_VERDICT_JSON
    assert json.loads(json.dumps(verdict.to_dict())) == FULL_VERDICT_JSON  # plain JSON, nothing else
    assert Verdict.from_dict(FULL_VERDICT_JSON) == verdict
    assert Verdict.from_dict(FULL_VERDICT_JSON).to_dict() == FULL_VERDICT_JSON


def test_a_verdict_without_provenance_stores_an_empty_object() -> None:
    verdict = Verdict(status=Status.ERROR, stage=Stage.PROBLEM, error_kind=ErrorKind.INFRA)
    assert verdict.to_dict()["provenance"] == {} and verdict.provenance.empty
    assert Verdict.from_dict(verdict.to_dict()) == verdict


def test_rows_older_writers_hold_are_read_as_they_are() -> None:
    """Profile rows that name their figure ``total_ms``, a partial provenance, kernels with only
    some figures: read, and written back unchanged where the keys are this version's."""
    data = Verdict(status=Status.PASS, stage=Stage.DONE).to_dict()
    data["profile"] = [{"name": "k", "calls": 20, "total_ms": 14.1}]
    data["compile"] = {"ok": True, "seconds": 1.0, "kernels": [{"kernel": "k", "registers": 32}], "extensions": []}
    verdict = Verdict.from_dict(data)
    assert verdict.profile[0].ms == 14.1 and verdict.to_dict()["profile"] == data["profile"]
    assert verdict.compile is not None and verdict.compile.kernels[0].registers == 32
    assert verdict.to_dict()["compile"]["kernels"] == data["compile"]["kernels"]
    partial = Verdict.from_dict({**data, "provenance": {"device": "cpu", "tf32": False}})
    assert partial.provenance.device == "cpu" and partial.provenance.target is None


def test_a_malformed_verdict_names_the_field() -> None:
    data = _full_verdict().to_dict()
    data["trials"] = [{"seed_index": "zero", "passed": True, "mismatch_frac": 0.0}]
    with pytest.raises(WireError, match="seed_index"):
        Verdict.from_dict(data)


def test_a_verdict_stored_before_the_torch_compile_rename_reads_the_same() -> None:
    verdict = Verdict(status=Status.PASS, stage=Stage.DONE, timing=Timing.from_samples([2.0], clock="wall"),
                      baselines=Baselines(eager=Timing.from_samples([4.0], clock="wall"),
                                          torch_compile=Timing.from_samples([3.0], clock="wall")))
    stored = verdict.to_dict()
    baselines = dict(stored["baselines"])  # as 0.2 wrote it: "compile" and "compile_ms"
    baselines["compile"], baselines["compile_ms"] = baselines.pop("torch_compile"), baselines.pop("torch_compile_ms")
    assert Verdict.from_dict({**stored, "baselines": baselines}) == verdict
