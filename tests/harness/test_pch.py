"""The precompiled torch header of the build cache: built once per flag set, used only where g++
accepts it, published like a build, and never a change in what a candidate computes."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness import HarnessOptions, warm_headers
from harness.buildcache import BuildCache, _first_line_includes_torch, build_pch, publish_staged
from harness.buildcache.copies import current_pch_entries
from harness.buildcache.layout import _PCH_MAX, _PCH_RECIPE
from tests.support.paths import REPO
from vocabulary.evaluation import Target

# Every C++ build needs g++: where it is missing these tests fail (a broken environment), never skip.
GXX = shutil.which("g++") or "g++"

# A stand-in for torch/extension.h whose content depends on a flag (-O0 vs -O2), as torch's does.
FAKE_HEADER = """\
#pragma once
#ifdef __OPTIMIZE__
inline int kl_optimized() { return 1; }
#else
inline int kl_optimized() { return 0; }
#endif
"""


def _first_header_line(stderr: str) -> str:
    return next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "")


@pytest.mark.parametrize(("text", "expected"), [
    ("#include <torch/extension.h>\nint x;\n", True),
    ("// the binding\n/* block\n comment */\n\n  #  include \"torch/extension.h\"\n", True),
    ("#include <cmath>\n#include <torch/extension.h>\n", False),
    ("int x;\n#include <torch/extension.h>\n", False),
    ("", False),
])
def test_first_line_of_code_decides_whether_a_pch_can_apply(tmp_path: Path, text: str, expected: bool) -> None:
    path = tmp_path / "main.cpp"
    path.write_text(text)
    assert _first_line_includes_torch(path) is expected


def test_pch_is_used_with_its_own_flags_and_ignored_otherwise(tmp_path: Path) -> None:
    include = tmp_path / "include"
    (include / "torch").mkdir(parents=True)
    header = include / "torch" / "extension.h"
    header.write_text(FAKE_HEADER)
    flags = ["-isystem", str(include), "-O2", "-std=c++17"]
    pch = tmp_path / "pch"
    assert build_pch([GXX], flags, [], header, pch) == ("built", "")
    gch = pch / "torch" / "extension.h.gch"
    program = tmp_path / "main.cpp"
    program.write_text("// first a comment\n#include <torch/extension.h>\nint main() { return kl_optimized(); }\n")

    def compile_and_run(*extra: str) -> tuple[str, int]:
        exe = tmp_path / "a.out"
        done = subprocess.run([GXX, f"-I{pch}", *flags, *extra, "-Winvalid-pch", "-H", str(program), "-o", str(exe)],
                              capture_output=True, text=True, check=True)
        return done.stderr, subprocess.run([str(exe)], check=False).returncode

    stderr, code = compile_and_run()
    assert _first_header_line(stderr) == f"! {gch}" and code == 1  # used: the optimised definition
    stderr, code = compile_and_run("-O0")  # other flags: g++ refuses it and parses the header itself
    assert "not used because" in stderr and not stderr.lstrip().startswith("!") and code == 0
    program.write_text("int before = 0;\n#include <torch/extension.h>\nint main() { return kl_optimized(); }\n")
    stderr, code = compile_and_run()  # code before the include: not used, same program
    assert f"! {gch}" not in stderr and code == 1


def test_a_source_that_includes_the_header_after_the_implicit_include_compiles(tmp_path: Path) -> None:
    """load_inline puts ``#include <torch/extension.h>`` first unless ``no_implicit_headers``; the
    commonest binding includes it again. g++ takes the directory where it found the PCH for the
    header's own, so the second include must find the header there (issue 24, item 3: "fatal
    error: .../pch/<key>/torch/extension.h: No such file or directory")."""
    include = tmp_path / "include"
    (include / "torch").mkdir(parents=True)
    header = include / "torch" / "extension.h"
    header.write_text(FAKE_HEADER)
    flags = ["-isystem", str(include), "-O2"]
    pch = tmp_path / "pch"
    assert build_pch([GXX], flags, [], header, pch) == ("built", "")
    program = tmp_path / "main.cpp"  # what load_inline writes for such a binding
    program.write_text("#include <torch/extension.h>\n#include <torch/extension.h>\n"
                       "int main() { return kl_optimized(); }\n")
    done = subprocess.run([GXX, f"-I{pch}", *flags, "-Winvalid-pch", "-H", str(program), "-o", str(tmp_path / "a")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert _first_header_line(done.stderr) == f"! {pch / 'torch' / 'extension.h.gch'}"
    assert subprocess.run([str(tmp_path / "a")], check=False).returncode == 1
    assert (pch / "torch" / "extension.h").read_text() == FAKE_HEADER


def test_a_pch_that_cannot_be_built_is_reported_not_used(tmp_path: Path) -> None:
    include = tmp_path / "include"
    (include / "torch").mkdir(parents=True)
    (include / "torch" / "extension.h").write_text("#error not this one\n")
    status, detail = build_pch([GXX], ["-isystem", str(include)], [], include / "torch" / "extension.h",
                               tmp_path / "pch")
    assert status == "failed" and "not this one" in detail


def _staged_pch(staging: Path, key: str, *, extra: str | None = None, recipe: str | None = None) -> Path:
    entry = staging / "pch" / key
    (entry / "torch").mkdir(parents=True)
    (entry / "torch" / "extension.h.gch").write_bytes(b"gch")
    (entry / "torch" / "extension.h").write_text(FAKE_HEADER)
    (entry / "pch.json").write_text(json.dumps({"recipe": recipe or _PCH_RECIPE}))
    if extra:
        (entry / extra).write_text("x")
    return entry


def test_publish_moves_a_well_formed_pch_once_and_refuses_the_rest(tmp_path: Path) -> None:
    root, staging = tmp_path / "builds", tmp_path / "staging"
    good, other = "a" * 24, "b" * 24
    _staged_pch(staging, good)
    _staged_pch(staging, other, extra="evil.so")
    (staging / "pch" / "not-a-key").mkdir()
    linked = _staged_pch(staging, "c" * 24)
    (linked / "torch" / "extension.h.gch").unlink()
    (linked / "torch" / "extension.h.gch").symlink_to("/etc/passwd")
    assert publish_staged(staging, root) == [f"pch/{good}"]
    assert (root / "pch" / good / "torch" / "extension.h.gch").read_bytes() == b"gch"
    assert not (root / "pch" / other).exists() and not (root / "pch" / ("c" * 24)).exists()
    # a second compile's PCH of the same key never replaces the first
    second = tmp_path / "staging2"
    (_staged_pch(second, good) / "torch" / "extension.h.gch").write_bytes(b"other")
    assert publish_staged(second, root) == []
    assert (root / "pch" / good / "torch" / "extension.h.gch").read_bytes() == b"gch"


def test_publishing_a_pch_removes_those_of_an_older_recipe_and_they_take_no_room(tmp_path: Path) -> None:
    """A PCH built before the header was copied beside it (recipe 2) is never asked for again: it
    neither counts toward the cap nor stays on disk (~0.8 GB each) once a trusted sandbox publishes."""
    root, staging = tmp_path / "builds", tmp_path / "staging"
    old = [_staged_pch(root, f"{i:024x}", recipe="2") for i in range(_PCH_MAX)]
    (old[0] / "torch" / "extension.h").unlink()  # recipe 2 had no header beside the PCH
    # neither counted nor "in place" for a warm-up marker that names them (harness.compiler)
    assert current_pch_entries(root / "pch") == []
    _staged_pch(staging, "e" * 24)
    assert publish_staged(staging, root) == [f"pch/{'e' * 24}"]
    assert sorted(p.name for p in (root / "pch").iterdir()) == ["e" * 24]
    assert [p.name for p in current_pch_entries(root / "pch")] == ["e" * 24]


def test_pch_can_be_turned_off_per_cache_or_per_build(tmp_path: Path) -> None:
    assert BuildCache(tmp_path, mode="build").pch is True
    (tmp_path / "pch").mkdir()
    (tmp_path / "pch" / "disabled").write_text("")
    assert BuildCache(tmp_path, mode="build").pch is False
    assert BuildCache(tmp_path, mode="build", pch=True).pch is True


_PROBE = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch
    from harness.buildcache import BuildCache
    cache = BuildCache(Path(sys.argv[1]), mode="build", max_jobs=2, pch=True)
    cache.install()
    from torch.utils.cpp_extension import load_inline
    source = ("// a binding whose first line of code includes torch\\n#include <torch/extension.h>\\n"
              "torch::Tensor twice_plus_one(torch::Tensor x) { return x * 2 + 1; }\\n")
    module = load_inline(name="kl_pch_probe", cpp_sources=source, functions=["twice_plus_one"],
                         extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"], no_implicit_headers=True)
    records = [r.to_dict() for r in cache.records]
    print(json.dumps({"records": records, "out": module.twice_plus_one(torch.arange(5.0)).tolist()}))
""")


def test_a_real_binding_is_compiled_with_the_pch_and_computes_the_same(harness_cache: Path) -> None:
    """One real build (the CPU examples' flags, so the PCH is the one they share; cached after the
    first run): the result is right, and the build's own compile command makes g++ read the PCH.
    The header is warmed first, as a worker does at start-up: under the warm-up's lock, so the
    session builds it once (built here directly, it was built twice at once when another test's
    Referee warmed it meanwhile: ~40 CPU-seconds of `make test`)."""
    assert warm_headers(Target.CPU, HarnessOptions(cache_dir=harness_cache), prescribed_only=True)
    root = harness_cache / "builds"
    done = subprocess.run([sys.executable, "-c", _PROBE, str(root)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["out"] == [1.0, 3.0, 5.0, 7.0, 9.0]
    (record,) = result["records"]
    if not record["cached"]:
        assert record["pch"]["status"] == "used", record["pch"]  # the warmed header (with its error, if it failed)
    build = root / f"kl_pch_probe-{record['key']}"
    cflags_line = next(ln for ln in (build / "build.ninja").read_text().splitlines() if ln.startswith("cflags ="))
    cflags = shlex.split(cflags_line.removeprefix("cflags ="))
    pch_dirs = [f[2:] for f in cflags if f.startswith("-I") and "/pch/" in f]
    assert len(pch_dirs) == 1 and cflags[0] == f"-I{pch_dirs[0]}"  # before torch's -isystem directories
    gch = Path(pch_dirs[0]) / "torch" / "extension.h.gch"
    assert gch.is_file() and (gch.parent.parent / "pch.json").is_file()
    probe = subprocess.run([GXX, *cflags, "-Winvalid-pch", "-H", "-fsyntax-only", str(build / "main.cpp")],
                           capture_output=True, text=True, check=True)
    assert _first_header_line(probe.stderr) == f"! {gch}"


def test_the_playbook_asks_for_the_include_the_pch_needs() -> None:
    from agent.playbook import playbook

    for target in ("cuda", "cpu"):
        text = playbook(target)
        assert "#include <torch/extension.h>" in text and "first line of code" in text and "extra_cflags" in text


#: Appended to the CPU example: its import-time code stages a PCH under a key of its own choosing.
_PLANT = """

import os as _os
import pathlib as _pathlib
_planted = _pathlib.Path(_os.environ["HOME"]) / "builds" / "pch" / ("d" * 24)
(_planted / "torch").mkdir(parents=True, exist_ok=True)
(_planted / "torch" / "extension.h.gch").write_bytes(b"poison")
(_planted / "pch.json").write_text("{}")
"""


def test_the_referee_warms_the_pch_itself_and_a_candidate_cannot_plant_one(harness_cache: Path) -> None:
    """The Referee's trusted warm-up sandbox publishes the PCH of the prescribed flags (and records it);
    a candidate's compile sandbox publishes builds but never a PCH; the same source again needs no
    compile sandbox at all."""
    from harness import HarnessOptions, Referee
    from problems import load_problem
    from vocabulary.evaluation import Depth

    options = HarnessOptions(cache_dir=harness_cache, secret_seed=1, compile_baseline=False)
    source = (REPO / "examples" / "seed1_cpu.py").read_text() + _PLANT
    with Referee(load_problem("level2/conv_tanh_scale_bias_maxpool"), "cpu", options) as referee:
        first = referee.evaluate(source, depth=Depth.COMPILE)
        again = referee.evaluate(source, depth=Depth.COMPILE)
    assert first.compile is not None and first.compile.ok, first.message + first.log[-2000:]
    assert not (options.builds_dir / "pch" / ("d" * 24)).exists()
    keys = json.loads((options.builds_dir / "pch" / "warm-cpu.json").read_text())
    assert keys and all((options.builds_dir / "pch" / k / "torch" / "extension.h.gch").is_file() for k in keys)
    assert again.compile is not None and again.compile.ok and again.compile.seconds == 0.0
    assert all(e.cached for e in again.compile.extensions)


def test_use_only_mode_never_builds_a_pch(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path, mode="build", pch="use")
    assert cache.pch is True and cache.pch_build is False
    assert BuildCache(tmp_path, mode="build").pch_build is True


def test_a_header_published_meanwhile_from_a_staging_directory_serves_the_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's warm-up publishes its header from a staging directory without the builders' lock.
    A build that built the same key meanwhile uses the published header; before, its rename failed
    ("[Errno 39] Directory not empty") and its record said the header "failed" (seen in `make test`)."""
    from harness.buildcache import pch as pch_steps
    from harness.buildcache.records import BuildRecord

    cache = BuildCache(tmp_path / "builds", mode="build", pch=True)
    published: list[Path] = []

    def built_while_a_warm_up_published(compiler: Sequence[str], flags: Sequence[str], post: Sequence[str],
                                        header: Path, directory: Path) -> tuple[str, str]:
        (directory / "torch").mkdir(parents=True)
        (directory / "torch" / "extension.h.gch").write_bytes(b"gch")
        staging = tmp_path / "staging"
        _staged_pch(staging, directory.name.split(".")[1])
        assert publish_staged(staging, tmp_path / "builds")  # the warm-up's header, same key
        published.append(tmp_path / "builds" / "pch" / directory.name.split(".")[1])
        return "built", ""

    monkeypatch.setattr(pch_steps, "build_pch", built_while_a_warm_up_published)
    record = BuildRecord(name="kl_race", key="k", cached=False, extra_cflags=("-O3", "-fopenmp"))
    found = cache._pch_include(["-O3", "-fopenmp"], [], record)
    assert published and found == published[0]
    assert record.pch is not None and record.pch.status == "used", record.pch
