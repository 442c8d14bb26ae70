"""On an H200 (`pytest -m gpu`): every level-1 CUDA example the scripted LLM submits
(``examples/level1/<problem>_cuda.py``) passes the referee on its bundled problem, at full size
with the extra shapes and the value-distribution trial; the stage events of each evaluation come
as one started and one finished per stage. torch + pytest + the harness only.

Figures (speedups against eager and torch.compile, compile seconds) go to stdout (run with -s)
and, when KERNELLOOP_GPU_REPORT is set, to that JSON-lines file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee
from problems import load_problem
from tests.support.gpu import report
from tests.support.paths import REPO
from vocabulary.stages import StageEvent
from vocabulary.verdict import Status

pytestmark = pytest.mark.gpu

LEVEL1 = sorted(p.stem for p in (REPO / "problems" / "bundled" / "level1").glob("*.py"))
SECRET = 20261202


@pytest.fixture(scope="module")
def gpu_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kept = os.environ.get("KERNELLOOP_TEST_CACHE")
    return Path(kept) if kept else tmp_path_factory.mktemp("gpu-cache")


def test_every_level1_problem_has_a_cuda_example() -> None:
    assert len(LEVEL1) == 13
    missing = [name for name in LEVEL1 if not (REPO / "examples" / "level1" / f"{name}_cuda.py").is_file()]
    assert not missing


@pytest.mark.parametrize("name", LEVEL1)
def test_level1_cuda_example_passes(name: str, gpu_cache: Path) -> None:
    source = (REPO / "examples" / "level1" / f"{name}_cuda.py").read_text()
    seen: list[StageEvent] = []
    options = HarnessOptions(cache_dir=gpu_cache, secret_seed=SECRET)
    with Referee(load_problem(f"level1/{name}"), "cuda", options, on_stage=seen.append) as referee:
        verdict = referee.evaluate(source)
    stages = [(e.stage.value, e.phase.value) for e in seen]
    report({
        "problem": f"level1/{name}", "example": f"examples/level1/{name}_cuda.py", "status": verdict.status.value,
        "stage": verdict.stage.value, "message": verdict.message[:300],
        "device": verdict.provenance.device,
        "median_ms": verdict.timing.median_ms if verdict.timing else None,
        "eager_ms": verdict.baselines.eager.median_ms if verdict.baselines and verdict.baselines.eager else None,
        "speedup_vs_eager": verdict.speedup_vs_eager, "speedup_vs_compile": verdict.speedup_vs_compile,
        "pct_of_sol": verdict.pct_of_sol, "compile_s": verdict.compile.seconds if verdict.compile else None,
        "max_abs_err": max((t.max_abs_err or 0.0 for t in verdict.trials), default=None), "stages": stages,
    }, tag="GPU-LEVEL1")
    # A kernel far faster than eager is quarantined for a re-time, not failed: both are correct.
    assert verdict.status in (Status.PASS, Status.SUSPICIOUS), (
        f"{verdict.status.value} {verdict.stage.value}: {verdict.message}\n{verdict.log[-3000:]}")
    assert verdict.correct and verdict.trials and all(t.passed for t in verdict.trials)
    assert stages[-6:] == [(s, p) for s in ("load", "correctness", "timing") for p in ("started", "finished")]
    assert [p for _, p in stages] == ["started", "finished"] * (len(stages) // 2)
