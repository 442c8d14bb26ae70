"""KernelBench forms through admission, import, evaluation and bench, on problems and candidates
written here (in KernelBench's style): tuple-assigned and derived sizes, a GPU-sized problem on
the cpu target, dropout, a candidate with KernelBench-style load_inline flags."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli.main
from benchmarks.kernelbench_cpu.make_candidates import MODELS, candidate_source
from cli.client.bench import read_suite
from cli.main import app
from harness import HarnessOptions, TimingOptions
from harness.admission import admit
from harness.retime import evaluate_with_retime
from problems import parse_problem
from vocabulary.verdict import Status

pytestmark = pytest.mark.slow

QUICK_TIMING = TimingOptions(warmup_ms=5, min_repeats=5, max_time_s=0.3, input_sets=2)

#: Sized for a GPU: 2**32 elements in, as many out (34.4 GB of float32); input_shape is derived.
GPU_SIZED = '''"""A GPU-sized elementwise problem."""
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, slope):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1) * slope)

    def forward(self, x):
        return torch.relu(x) * self.scale + x

batch_size = 65536
dim = 65536
input_shape = (batch_size, dim)

def get_inputs():
    return [torch.randn(*input_shape)]

def get_init_inputs():
    return [0.5]
'''

#: Sizes by tuple unpacking; a 3-D conv (KernelBench level-2 style).
TUPLE_SIZED = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, c_in, c_out, k):
        super().__init__()
        self.conv = nn.Conv3d(c_in, c_out, k)

    def forward(self, x):
        return torch.tanh(self.conv(x))

batch_size = 128
c_in, c_out, k = 3, 16, 3
D, H, W = 64, 256, 256

def get_inputs():
    return [torch.randn(batch_size, c_in, D, H, W)]

def get_init_inputs():
    return [c_in, c_out, k]
'''

#: Dropout between a matmul and a softmax, as KernelBench's level-2 "Matmul_Dropout_Softmax".
DROPOUT = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features, dropout_p):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, x):
        return torch.softmax(self.dropout(self.matmul(x)), dim=1)

batch_size = 16
in_features = 64
out_features = 48
dropout_p = 0.3

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, dropout_p]
'''

DROPOUT_CANDIDATE = candidate_source(MODELS["66_Matmul_Dropout_Softmax.py"], problem="test dropout")


@pytest.fixture(scope="module")
def options(harness_cache: Path) -> HarnessOptions:
    return HarnessOptions(cache_dir=harness_cache, secret_seed=11, timing=QUICK_TIMING, compile_baseline=False,
                          cpu_budget_mb=1024)


def test_a_gpu_sized_problem_is_refused_on_cpu_with_the_figure_before_allocating(options: HarnessOptions) -> None:
    started = time.monotonic()
    report = admit(parse_problem(GPU_SIZED, problem_id="user/gpu-sized"), "cpu", options)
    assert not report.admitted
    (reason,) = report.reasons
    assert "inputs need 34.4 GB (inputs 17.2 GB, parameters 4 B, outputs 17.2 GB)" in reason
    assert "the CPU budget is 1.1 GB" in reason
    assert time.monotonic() - started < 120  # drawing 17 GB on this host would not end so soon, if at all


def test_cpu_sizes_flow_into_derived_and_tuple_assigned_constants(options: HarnessOptions) -> None:
    derived = parse_problem(GPU_SIZED + 'CPU_SIZES = {"batch_size": 4, "dim": 8}\nEXTRA_SHAPES = [{"dim": 5}]\n',
                            problem_id="user/derived")
    report = admit(derived, "cpu", options)
    assert report.admitted, report.reasons
    assert report.output_shapes == ((4, 8),)  # input_shape followed batch_size and dim
    tuples = parse_problem(TUPLE_SIZED + 'CPU_SIZES = {"batch_size": 2, "D": 6, "H": 8, "W": 8}\n',
                           problem_id="user/tuples")
    report = admit(tuples, "cpu", options)
    assert report.admitted, report.reasons
    assert report.output_shapes == ((2, 16, 4, 6, 6),)


def test_dropout_is_admitted_when_declared_random_and_refused_with_the_rule_otherwise(
        options: HarnessOptions) -> None:
    undeclared = admit(parse_problem(DROPOUT, problem_id="user/dropout"), "cpu", options)
    assert not undeclared.admitted
    assert any("declare RANDOM = True" in r for r in undeclared.reasons), undeclared.reasons
    declared = admit(parse_problem(DROPOUT + "RANDOM = True\n", problem_id="user/dropout"), "cpu", options)
    assert declared.admitted, declared.reasons
    deterministic = next(c for c in declared.checks if c.name == "deterministic")
    assert "draws random numbers" in deterministic.detail


def test_import_writes_cpu_ready_copies_beside_and_leaves_the_originals(tmp_path: Path, harness_cache: Path) -> None:
    folder, out = tmp_path / "kb", tmp_path / "ready"
    folder.mkdir()
    for name, source in (("1_GpuSized.py", GPU_SIZED), ("2_Dropout.py", DROPOUT), ("3_Broken.py", "x = 1\n")):
        (folder / name).write_text(source)
    before = {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    result = CliRunner().invoke(app, ["problems", "import", str(folder), "--out", str(out), "--budget-mb", "1",
                                      "--cache-dir", str(harness_cache)])
    assert result.exit_code == 1, result.output  # 3_Broken is refused
    after = {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    assert after == before
    sized = (out / "1_GpuSized.py").read_text()
    assert sized.startswith(GPU_SIZED) and "CPU_SIZES = {'batch_size': 256, 'dim': 256}" in sized
    dropout = (out / "2_Dropout.py").read_text()
    assert dropout.startswith(DROPOUT) and "RANDOM = True" in dropout
    assert not (out / "3_Broken.py").exists()
    assert [e.name for e in read_suite(out / "suite.txt")] == ["1_GpuSized", "2_Dropout"]
    problem = parse_problem(sized, problem_id="1_GpuSized")
    assert problem.size_overrides("cpu")["input_shape"] == (256, 256)


def test_kernelbench_style_candidate_passes_a_random_problem_with_timed_rechecks(options: HarnessOptions) -> None:
    problem = parse_problem(DROPOUT + "RANDOM = True\n", problem_id="user/dropout")
    verdict, first = evaluate_with_retime(problem, DROPOUT_CANDIDATE, "cpu", options)
    assert first is None
    assert verdict.status is Status.PASS, (verdict.message, verdict.log[-2000:])
    assert verdict.timing is not None and verdict.speedup_vs_eager is not None
    assert verdict.compile is not None and verdict.compile.ok


def test_a_candidate_drawing_its_own_random_numbers_fails(options: HarnessOptions) -> None:
    own_rng = DROPOUT_CANDIDATE.replace("x = self.dropout(self.matmul(x))",
                                        "x = self.matmul(x)\n        x = x * (torch.rand_like(x) > 0.3) / 0.7")
    own_rng = own_rng.replace("import torch.nn as nn", "import torch\nimport torch.nn as nn")
    problem = parse_problem(DROPOUT + "RANDOM = True\n", problem_id="user/dropout")
    verdict, _ = evaluate_with_retime(problem, own_rng, "cpu", options)
    assert verdict.status is Status.FAIL, (verdict.status, verdict.message, verdict.log[-1500:])


def test_eval_re_times_a_suspicious_candidate_before_answering(options: HarnessOptions, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "problem.py").write_text(DROPOUT + "RANDOM = True\n")
    (tmp_path / "candidate.py").write_text(DROPOUT_CANDIDATE)
    # Every speedup is "suspicious" at this ceiling: the first verdict is quarantined, the re-time decides.
    monkeypatch.setattr(cli.main, "machine_options", lambda cache_dir, **changes: options.replace(
        suspicious_speedup=1e-9, **changes))
    result = CliRunner().invoke(app, ["eval", str(tmp_path / "problem.py"), str(tmp_path / "candidate.py"),
                                      "--target", "cpu", "--json", "--no-compile-baseline"])
    assert "re-timing in a fresh process with fresh seeds" in " ".join(result.output.split())
    verdict = result.output.strip().splitlines()[-1]
    assert '"status": "pass"' in verdict and '"timing_mode": "metered, re-judged"' in verdict, result.output[-3000:]
    assert result.exit_code == 0


def test_bench_with_candidates_prints_kernelbench_figures(tmp_path: Path, harness_cache: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELLOOP_TIMING_MAX_S", "0.3")  # the machine's timing (`cli.common.machine_options`)
    problems, candidates = tmp_path / "problems", tmp_path / "candidates"
    problems.mkdir()
    candidates.mkdir()
    (problems / "66_Dropout.py").write_text(DROPOUT + "RANDOM = True\n")
    (problems / "suite.txt").write_text("66_Dropout.py\n7_Missing_candidate.py\n")
    (problems / "7_Missing_candidate.py").write_text(GPU_SIZED + 'CPU_SIZES = {"batch_size": 4, "dim": 8}\n')
    (candidates / "66_Dropout.py").write_text(DROPOUT_CANDIDATE)
    result = CliRunner().invoke(app, ["bench", str(problems / "suite.txt"), "--candidates", str(candidates),
                                      "--target", "cpu", "--out", str(tmp_path / "out"),
                                      "--cache-dir", str(harness_cache)])
    assert result.exit_code == 0, result.output[-3000:]
    table = (tmp_path / "out" / "bench.md").read_text()
    assert "| fast_0 | fast_1 | fast_1.5 | fast_2 | geomean vs eager | geomean vs torch.compile | problems |" in table
    assert "| 0.50 |" in table  # fast_0: one of two correct
    assert "| 7_Missing_candidate | no candidate | no |" in table
    assert "torch 2." in table and "(cpu target)" in table
