"""Trusted builds: a candidate's extension is built by a builder sandbox that runs no candidate code,
objects of unchanged translation units are reused, and nothing a candidate's import-time code
writes (objects, headers) is ever used by another build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.buildcache import builder_refusal, normalise_header_flags, publish_staged

POISON = b"\x7fELF poisoned object planted by a candidate"


@pytest.mark.parametrize(("flags", "expected"), [
    (["", "-v"], []),  # KernelBench's extra_cflags=[""] and verbose builds: no flags at all
    (["-O3", "-fopenmp"], ["-fopenmp", "-O3"]),
    (["-O1"], ["-O1"]),
    (["-O"], ["-O1"]),
    (["-O2", "-Wall", "-Wextra", "-g", "-w"], ["-O2"]),
    (["-std=c++17", "-O3", "-std=c++17"], ["-std=c++17", "-O3"]),
    (["-O3", "-O0"], []),  # the last -O wins: g++'s default
    (["-Os"], ["-Os"]),
    (["-DNDEBUG", "-fopenmp", "-fopenmp"], ["-DNDEBUG", "-fopenmp"]),
    (["-Wl,-O1", "-Wp,-DX"], ["-Wp,-DX"]),  # preprocessor options stay, linker ones cannot matter
])
def test_header_flags_are_normalised_to_what_can_change_the_header(flags: list[str], expected: list[str]) -> None:
    assert normalise_header_flags(flags) == expected


@pytest.mark.parametrize(("kwargs", "refused"), [
    ({"extra_cflags": ["-O1"], "extra_cuda_cflags": ["-O3", "--use_fast_math", "-Xptxas=-v"],
      "no_implicit_headers": True}, None),
    ({"extra_cflags": [""], "extra_ldflags": [""], "with_cuda": True}, None),
    ({"extra_cuda_cflags": ["-gencode", "arch=compute_90a,code=sm_90a", "--threads", "2"]}, None),
    ({"extra_cflags": ["-fplugin=evil"]}, "flag '-fplugin=evil'"),
    ({"extra_cflags": ["-B", "x"]}, "flag '-B'"),
    ({"extra_cuda_cflags": ["-ccbin=gcc"]}, "flag '-ccbin=gcc'"),
    ({"extra_cflags": ["-I/tmp/x"]}, "flag '-I/tmp/x'"),
    ({"extra_cflags": ["@flags.txt"]}, "flag '@flags.txt'"),
    ({"extra_ldflags": ["-Wl,-plugin,x.so"]}, "flag '-Wl,-plugin,x.so'"),
    ({"extra_cflags": ["-fprofile-use=p"]}, "flag '-fprofile-use=p'"),
    ({"extra_include_paths": ["/tmp"]}, "extra_include_paths"),
    ({"is_standalone": True}, "argument 'is_standalone'"),
])
def test_the_builder_takes_plain_flags_only(kwargs: dict, refused: str | None) -> None:
    assert builder_refusal(kwargs) == refused


def _staged_object(staging: Path, key: str, *, extra: str | None = None) -> Path:
    entry = staging / "objects" / key
    entry.mkdir(parents=True)
    (entry / "object.o").write_bytes(POISON)
    (entry / "object.json").write_text("{}")
    if extra:
        (entry / extra).write_text("x")
    return entry


def test_objects_are_published_from_a_builder_only_and_never_replaced(tmp_path: Path) -> None:
    root, staging = tmp_path / "builds", tmp_path / "staging"
    good = "a" * 24
    _staged_object(staging, good)
    _staged_object(staging, "b" * 24, extra="evil.so")
    linked = _staged_object(staging, "c" * 24)
    (linked / "object.o").unlink()
    (linked / "object.o").symlink_to("/etc/passwd")
    assert publish_staged(staging, root) == []  # a candidate's compile sandbox: objects are never taken
    assert not (root / "objects" / good).exists()
    assert publish_staged(staging, root, objects=True) == [f"objects/{good}"]
    assert not (root / "objects" / ("b" * 24)).exists() and not (root / "objects" / ("c" * 24)).exists()
    second = tmp_path / "staging2"
    (_staged_object(second, good) / "object.o").write_bytes(b"other")
    assert publish_staged(second, root, objects=True) == []
    assert (root / "objects" / good / "object.o").read_bytes() == POISON


_BINDING = r'''
import torch
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
// KL_TAG
torch::Tensor kl_affine(torch::Tensor x) { return x * 3 + 1; }
"""
ext = load_inline(name="kl_trusted_probe", cpp_sources=SOURCE, functions=["kl_affine"],
                  extra_cflags=["-O3", "-fopenmp"], extra_ldflags=LDFLAGS, no_implicit_headers=True)
assert ext.kl_affine(torch.arange(3.0)).tolist() == [1.0, 4.0, 7.0]
'''

#: Import-time code of the poisoning candidate: it plants an object under KEY (and a header) in
#: its own staging directory, where its compile sandbox may write, and tries the cache itself; and a
#: whole build (marker and library) under the honest candidate's build key, BUILD.
_PLANT = '''
import os as _os
import pathlib as _pathlib
_home = _pathlib.Path(_os.environ["HOME"])
_build = _home / "builds" / BUILD
_build.mkdir(parents=True, exist_ok=True)
(_build / "built.json").write_text('{"name": "kl_trusted_probe", "module_file": "kl_trusted_probe.so"}')
(_build / "kl_trusted_probe.so").write_bytes(POISON)
for _base in (_home / "builds", _pathlib.Path(BUILDS)):
    try:
        _entry = _base / "objects" / KEY
        _entry.mkdir(parents=True, exist_ok=True)
        (_entry / "object.o").write_bytes(POISON)
        (_entry / "object.json").write_text("{}")
        _pch = _base / "pch" / KEY / "torch"
        _pch.mkdir(parents=True, exist_ok=True)
        (_pch / "extension.h.gch").write_bytes(POISON)
        (_pch.parent / "pch.json").write_text("{}")
    except OSError:
        pass  # the cache is read-only to a compile sandbox
'''


def _candidate(tag: str, ldflags: list[str], plant: str = "") -> str:
    return _BINDING.replace("KL_TAG", tag).replace("LDFLAGS", repr(ldflags)) + plant


def test_a_candidate_cannot_plant_an_object_or_header_that_another_build_uses(harness_cache: Path,
                                                                              tmp_path: Path) -> None:
    """Builds go through the trusted builder, which keeps the binding's object; a build that differs
    only in link flags reuses it. A candidate that plants a poisoned object under the very key of
    another candidate's binding (and a header), in its staging directory and in the cache, gets
    neither published: the other candidate, built again from scratch, compiles its own object."""
    from harness import HarnessOptions, Referee
    from problems import load_problem
    from vocabulary.evaluation import Depth

    options = HarnessOptions(cache_dir=harness_cache, secret_seed=1, compile_baseline=False)
    builds = options.builds_dir
    tag = f"kl-trusted-{os.getpid()}-{os.urandom(4).hex()}"  # sources no earlier run built
    honest = _candidate(tag, ["-fopenmp"])
    relinked = _candidate(tag, ["-fopenmp", "-Wl,-O1"])
    with Referee(load_problem("level2/conv_tanh_scale_bias_maxpool"), "cpu", options) as referee:
        first = referee.evaluate(honest, depth=Depth.COMPILE)
        assert first.compile is not None and first.compile.ok, first.log[-3000:]
        (ext,) = first.compile.extensions
        assert ext.via == "builder" and not ext.cached
        (unit,) = ext.units or ()
        assert unit.source == "main.cpp" and not unit.reused and unit.kept == "stored"
        build = builds / "trusted" / f"{ext.name}-{ext.key}"
        assert tag in (build / "main.cpp").read_text()
        key = unit.key  # the binding's object, as the builder keeps it
        assert (builds / "objects" / key / "object.o").read_bytes() == (build / "main.o").read_bytes()
        assert json.loads((builds / "objects" / key / "object.json").read_text())["source"] == "main.cpp"

        # Another Referee (another job) finds the builder's build, and says where it is: the
        # candidate sandbox gets its copy from there.
        with Referee(load_problem("level2/conv_tanh_scale_bias_maxpool"), "cpu", options) as other:
            found = other.evaluate(honest, depth=Depth.COMPILE)
        assert found.compile is not None and found.compile.ok, found.log[-3000:]
        assert found.compile.extensions[0].cached and found.compile.extensions[0].via == "builder"

        # The same binding text and compile flags, other link flags: the object is reused.
        again = referee.evaluate(relinked, depth=Depth.COMPILE)
        assert again.compile is not None and again.compile.ok, again.log[-3000:]
        (unit,) = again.compile.extensions[0].units or ()
        assert unit.reused and again.compile.extensions[0].key != ext.key

        # The first candidate's build and object are gone (evicted); a poisoner plants an object
        # under that key (and a header); then the first candidate is built again.
        shutil.rmtree(builds / "objects" / key)
        shutil.rmtree(build)
        plant = _PLANT.replace("KEY", repr(key)).replace("BUILDS", repr(str(builds))).replace(
            "POISON", repr(POISON)).replace("BUILD", repr(build.name))
        poisoner = referee.evaluate(_candidate(tag + "-poisoner", ["-fopenmp"], plant), depth=Depth.COMPILE)
        assert poisoner.compile is not None and poisoner.compile.ok, poisoner.log[-3000:]
        assert not (builds / "objects" / key).exists()
        # Its whole build is published where the compile sandboxes' builds go (as before), never
        # among the builder's: the honest candidate's compile does not look there.
        assert (builds / build.name / "kl_trusted_probe.so").read_bytes() == POISON
        rebuilt = referee.evaluate(honest, depth=Depth.COMPILE)
    assert rebuilt.compile is not None and rebuilt.compile.ok, rebuilt.log[-3000:]
    (again_ext,) = rebuilt.compile.extensions
    assert not again_ext.cached and rebuilt.compile.seconds > 0  # built, not the planted build
    (unit,) = again_ext.units or ()
    assert unit.key == key and not unit.reused and unit.kept == "stored"
    assert (builds / "objects" / key / "object.o").read_bytes() != POISON
    assert not (builds / "pch" / key).exists()
    assert not any(p.read_bytes() == POISON for p in (builds / "objects").glob("*/object.o"))
    _check_loads(build, ext.name)
    shutil.rmtree(builds / build.name)  # the planted build: not left in a kept test cache


def _check_loads(build: Path, name: str) -> None:
    """The rebuilt library computes what its source says (in a fresh interpreter)."""
    code = textwrap.dedent(f"""
        import importlib.machinery, importlib.util, torch
        loader = importlib.machinery.ExtensionFileLoader({name!r}, {str(build / (name + '.so'))!r})
        spec = importlib.util.spec_from_file_location({name!r}, loader.path, loader=loader)
        module = importlib.util.module_from_spec(spec); loader.exec_module(module)
        print(module.kl_affine(torch.arange(3.0)).tolist())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "[1.0, 4.0, 7.0]", done.stderr[-2000:]
