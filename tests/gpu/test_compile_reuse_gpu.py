"""On the GPU host (`pytest -m gpu`): CUDA compiles reuse what did not change, and the headers
prepared at start-up serve the flags models use. Compiles need no GPU, but the CUDA build of torch
and nvcc live there. Figures go to stdout (-s) and to $KERNELLOOP_GPU_REPORT.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee, warm_headers
from problems import load_problem
from tests.support.gpu import report
from tests.support.paths import REPO
from vocabulary.evaluation import Depth

pytestmark = pytest.mark.gpu

#: The issue's target for a kernel-only edit of the playbook style on the H200 host (stage wall).
KERNEL_EDIT_TARGET_S = 3.0


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kept = os.environ.get("KERNELLOOP_TEST_CACHE")
    path = Path(kept) if kept else tmp_path_factory.mktemp("gpu-compile-cache")
    assert warm_headers("cuda", HarnessOptions(cache_dir=path))  # what a worker does at start-up
    return path


def _playbook(nonce: str, kernel_nonce: str, *, kernelbench_flags: bool = False) -> str:
    source = (REPO / "examples" / "seed1_cuda.py").read_text()
    source = source.replace("#include <torch/extension.h>\n", f"#include <torch/extension.h>\n// {nonce}\n", 1)
    source = source.replace("#include <cuda_runtime.h>\n", f"#include <cuda_runtime.h>\n// {kernel_nonce}\n", 1)
    if kernelbench_flags:
        source = source.replace('extra_cflags=["-O1"],', 'extra_cflags=[""], extra_ldflags=[""], verbose=True,')
    return source


def _compile(referee: Referee, source: str) -> tuple[float, dict]:
    started = time.perf_counter()
    verdict = referee.evaluate(source, depth=Depth.COMPILE)
    wall = time.perf_counter() - started
    assert verdict.compile is not None and verdict.compile.ok, verdict.log[-3000:]
    (ext,) = verdict.compile.extensions
    return wall, ext.to_dict()


@pytest.mark.parametrize("kernelbench_flags", [False, True], ids=["playbook", "kernelbench_flags"])
def test_a_kernel_only_edit_recompiles_only_the_kernels(cache: Path, kernelbench_flags: bool) -> None:
    options = HarnessOptions(cache_dir=cache, secret_seed=1, compile_baseline=False)
    nonce = secrets.token_hex(4)
    with Referee(load_problem("level2/conv_tanh_scale_bias_maxpool"), "cuda", options) as referee:
        referee.evaluate("import torch\n", depth=Depth.COMPILE)  # its end prestarts the next sandboxes
        time.sleep(8)  # the model writing its first candidate
        cold_s, cold = _compile(referee, _playbook(nonce, f"{nonce}-k0", kernelbench_flags=kernelbench_flags))
        time.sleep(8)
        edit_s, edit = _compile(referee, _playbook(nonce, f"{nonce}-k1", kernelbench_flags=kernelbench_flags))
    assert cold["via"] == "builder" and edit["via"] == "builder"
    assert cold["pch"]["status"] == "used", cold["pch"]  # the header prepared at start-up serves these flags
    units = {u["source"]: u for u in edit["units"]}
    assert units["main.cpp"]["reused"] and not units["cuda.cu"]["reused"]
    report({"test": "compile_reuse", "style": "kernelbench_flags" if kernelbench_flags else "playbook",
            "cold_wall_s": round(cold_s, 2), "edit_wall_s": round(edit_s, 2),
            "cold_units": cold["units"], "edit_units": edit["units"]})
    if not kernelbench_flags:
        assert edit_s <= KERNEL_EDIT_TARGET_S * 2, f"kernel-only edit took {edit_s:.1f} s"  # noise margin: 2x
