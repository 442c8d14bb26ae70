"""The patched model's source: extension names made distinct only where two kernels differ, the
model file found beside it or by its path, and the standalone file checking itself against the model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.modelsandbox import profile_model
from harness.options import HarnessOptions
from harness.patchsource import patched_source, unique_extension_names
from tests.support.models import example, kernels, model_path
from vocabulary.regionplan import select_regions

_KERNEL = 'from torch.utils.cpp_extension import load_inline\next = load_inline(name="ext", cpp_sources={src!r})\n'


def test_an_extension_name_two_kernels_build_differently_is_made_distinct_and_a_shared_one_kept() -> None:
    same = {"r1": _KERNEL.format(src="a"), "r2": _KERNEL.format(src="a")}
    assert unique_extension_names(same) == same  # one source for several regions: one build
    different = unique_extension_names({"r1": _KERNEL.format(src="a"), "r2": _KERNEL.format(src="b")})
    assert 'name="ext_r1"' in different["r1"] and 'name="ext_r2"' in different["r2"]


def test_the_standalone_patched_model_runs_beside_the_model_and_matches_it(tmp_path: Path, harness_cache: Path) -> None:
    model = example("conv_stem")
    profile = profile_model(model, "cpu", HarnessOptions(cache_dir=harness_cache), compile_gains=False)
    chosen = select_regions(profile)
    written = tmp_path / "out" / "patched.py"
    written.parent.mkdir()
    text = patched_source(model_name="conv_stem.py", regions=chosen, kernels=kernels("conv_stem"),
                          model_path=model_path("conv_stem"), out_path=written)
    written.write_text(text)
    assert repr(str(model_path("conv_stem").resolve())) in text  # not beside it: by its absolute path
    compile(patched_source(model_name="conv_stem.py", regions=chosen, kernels=kernels("conv_stem"),
                           model_source=model.source), "candidate.py", "exec")  # the referee's form
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(harness_cache / "torch-extensions-standalone")}
    result = subprocess.run([sys.executable, str(written), "--no-compile", "--trials", "2", "--runs", "3"],
                            capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "outputs match on 2 trials" in result.stdout and "patched" in result.stdout
