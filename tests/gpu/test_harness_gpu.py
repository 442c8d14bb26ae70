"""On an H200 (`pytest -m gpu`): the seed examples pass on cuda, and the harness's clock agrees
with `triton.testing.do_bench` measured in the same run; repeated evaluations agree.

Figures go to stdout (run with -s) and, when KERNELLOOP_GPU_REPORT is set, to that JSON file.
"""

from __future__ import annotations

import os
import statistics
import types
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee
from problems import load_problem
from tests.support.gpu import report
from tests.support.paths import REPO
from vocabulary.verdict import Status

pytestmark = pytest.mark.gpu

CASES = [
    ("level2/conv_tanh_scale_bias_maxpool", "seed1_cuda.py"),
    ("level2/conv_bn_scale_train", "seed2_train_cuda.py"),
    ("level2/conv_bn_scale_eval", "seed2_eval_cuda.py"),
]
SECRET = 20261129
#: Agreement targets of the issue: harness vs do_bench, and between repeated evaluations.
DO_BENCH_TOLERANCE = 0.03
REPEAT_SPREAD = 0.02


@pytest.fixture(scope="session")
def gpu_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kept = os.environ.get("KERNELLOOP_TEST_CACHE")
    return Path(kept) if kept else tmp_path_factory.mktemp("gpu-cache")


def do_bench_median(problem_id: str, source: str, cache: Path) -> float:
    """The same ModelNew, weights and inputs, timed by Triton's do_bench in this process."""
    import torch
    import triton.testing

    from harness.buildcache import BuildCache
    from harness.sandboxed import contract
    from harness.seeds import derive_seed, plan_trials

    problem = load_problem(problem_id)
    contract.tf32_off()
    BuildCache(cache / "builds", mode="load").install()
    module = types.ModuleType("kl_problem_bench")
    exec(compile(problem.source, "problem", "exec"), module.__dict__)
    cand = types.ModuleType("kl_candidate_bench")
    exec(compile(source, "candidate.py", "exec"), cand.__dict__)
    torch.manual_seed(derive_seed(SECRET, "init"))
    reference = module.Model(*module.get_init_inputs())
    weights = contract.redraw_weights(reference, derive_seed(SECRET, "weights"))
    model = cand.ModelNew(*module.get_init_inputs())
    model.load_state_dict(weights, strict=False)
    model.train(problem.mode.value == "train").cuda()
    trial = plan_trials(SECRET, trials=1, input_variants=False, extra_shapes=())[0]
    inputs = contract.make_inputs(module, trial, torch.device("cuda"))
    with torch.no_grad():
        return float(triton.testing.do_bench(lambda: model(*inputs), warmup=100, rep=1000, return_mode="median"))


@pytest.mark.parametrize(("problem_id", "example"), CASES)
def test_seed_example_passes_and_timing_agrees(problem_id: str, example: str, gpu_cache: Path) -> None:
    source = (REPO / "examples" / example).read_text()
    options = HarnessOptions(cache_dir=gpu_cache, secret_seed=SECRET)
    with Referee(load_problem(problem_id), "cuda", options) as referee:
        verdicts = [referee.evaluate(source) for _ in range(3)]
    for v in verdicts:
        assert v.status is Status.PASS, f"{v.status.value} {v.stage.value}: {v.message}\n{v.log[-3000:]}"
    medians = [v.timing.median_ms for v in verdicts]
    spread = (max(medians) - min(medians)) / min(medians)
    bench = do_bench_median(problem_id, source, gpu_cache)
    harness_median = statistics.median(medians)
    first = verdicts[0]
    entry = {
        "problem": problem_id, "example": example, "device": first.provenance.device,
        "harness_medians_ms": medians, "repeat_spread": spread, "do_bench_median_ms": bench,
        "harness_over_do_bench": harness_median / bench,
        "eager_ms": first.baselines.eager.median_ms if first.baselines and first.baselines.eager else None,
        "compile_ms": first.baselines.torch_compile_ms if first.baselines else None,
        "speedup_vs_eager": first.speedup_vs_eager, "speedup_vs_compile": first.speedup_vs_compile,
        "sol_ms": first.sol_ms, "pct_of_sol": first.pct_of_sol, "n": [v.timing.n for v in verdicts],
        "compile_s": [v.compile.seconds for v in verdicts], "sandbox": first.provenance.to_dict().get("sandbox"),
        "kernels": [k.to_dict() for k in first.compile.kernels],
        "max_abs_err": max(t.max_abs_err for t in first.trials),
    }
    report(entry)
    assert abs(harness_median / bench - 1) < DO_BENCH_TOLERANCE, entry
    if min(medians) >= 1.0:
        assert spread < REPEAT_SPREAD, entry
