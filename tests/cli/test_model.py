"""``kernelloop model``: bad inputs get clear errors (a model that fails to build, one that cannot
be captured, a file that is no model), and what can be captured of a model is offered."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.cli import KERNELLOOP, pythonpath, run
from tests.support.models import BROKEN_BUILD, DATA_DEPENDENT, UNTRACEABLE


def _env(home: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")}
    env.update(PYTHONPATH=pythonpath(), HOME=str(home), COLUMNS="200", KERNELLOOP_CACHE_DIR=str(cache),
               KERNELLOOP_DATA_DIR=str(home / "data"))
    return env


def _profile(tmp_path: Path, harness_cache: Path, name: str, source: str, *extra: str):
    path = tmp_path / name
    path.write_text(source)
    return run(["model", "profile", str(path), "--target", "cpu", "--no-compile-gains", *extra],
               _env(tmp_path, harness_cache), tmp_path, timeout=600, program=KERNELLOOP)


def test_a_model_that_fails_to_build_is_named_with_its_file_and_line(tmp_path: Path, harness_cache: Path) -> None:
    result = _profile(tmp_path, harness_cache, "broken.py", BROKEN_BUILD)
    assert result.returncode == 2
    assert "the model's code failed (broken.py, line 9): ValueError: dim must be even" in result.stderr


def test_a_model_that_cannot_be_captured_says_which_line_and_why(tmp_path: Path, harness_cache: Path) -> None:
    result = _profile(tmp_path, harness_cache, "branchy.py", UNTRACEABLE)
    assert result.returncode == 2
    assert "no part of branchy.py could be captured as a graph" in result.stderr
    assert "line 7: if x.max() > 0.5:" in result.stderr


def test_a_file_that_is_no_model_is_refused_before_anything_runs(tmp_path: Path, harness_cache: Path) -> None:
    result = _profile(tmp_path, harness_cache, "nothing.py", "x = 1\n")
    assert result.returncode == 2 and "nothing.py is not a model file" in result.stderr
    missing = run(["model", "apply", str(tmp_path / "nothing.py"), "--out", "p.py"], _env(tmp_path, harness_cache),
                  tmp_path, program=KERNELLOOP)
    assert missing.returncode == 2 and "--from RUN" in missing.stderr


def test_the_parts_that_can_be_captured_are_offered_with_what_could_not_be(tmp_path: Path, harness_cache: Path) -> None:
    result = _profile(tmp_path, harness_cache, "partly.py", DATA_DEPENDENT, "--json")
    assert result.returncode == 0, result.stderr
    profile = json.loads(result.stdout)
    assert profile["capture"]["units"] == ["norm", "fc"]
    assert profile["capture"]["failures"][0]["part"] == "(the whole model)"
    assert "line 13: if y.sum() > 0:" in profile["capture"]["failures"][0]["reason"]
    assert [r["ops"] for r in profile["regions"]] == [["layer_norm"], ["linear"]]
    assert profile["regions"][1]["lone_vendor_call"] and profile["selected"]
    assert "source" not in profile["regions"][0]
