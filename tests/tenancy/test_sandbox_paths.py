"""Issue 13, observation 1 at its root: what a sandbox is shown of the host.

``sys.path`` holds ``''`` (the working directory) and, in a checkout, the checkout itself: neither
may become a path bound back into a sandbox; the service's working directory, home and checkout are
hidden from every sandbox, except where hiding would cover the system. The named limit errors of
problem sandboxes come from their exit status or their error text."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import HarnessOptions
from harness.problemsandbox import compiler_cache_env, limit_message, problem_sandbox_spec
from harness.sandbox import _interpreter_paths, host_private_paths
from harness.sandboxspec import REPO_ROOT
from vocabulary.evaluation import Target


def test_the_working_directory_and_the_checkout_are_never_needed_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", str(tmp_path), str(REPO_ROOT), *sys.path])
    paths = _interpreter_paths()
    assert tmp_path not in paths and REPO_ROOT not in paths and Path("") not in paths
    assert {REPO_ROOT / "harness", REPO_ROOT / "problems", Path(sys.prefix)} <= set(paths)


def test_the_service_directory_home_and_checkout_are_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    hidden = host_private_paths()
    assert tmp_path.resolve() in hidden and REPO_ROOT in hidden and Path.home().resolve() in hidden
    monkeypatch.chdir("/")
    monkeypatch.setenv("HOME", "/usr")
    assert Path("/") not in host_private_paths() and Path("/usr") not in host_private_paths()


def test_a_problem_sandbox_sees_none_of_the_cache(tmp_path: Path) -> None:
    options = HarnessOptions(cache_dir=tmp_path / "cache", hidden_paths=(tmp_path / "data",), memory_limit_mb=2048,
                             process_limit=64)
    own = tmp_path / "cache" / "runs" / "referee-mine"
    spec = problem_sandbox_spec("reference", own / "reference-1", options, Target.CPU,
                                namespaces=("user", "mount", "net", "pid"), visible=(own,))
    assert options.cache_dir in spec.hidden_paths and tmp_path / "data" in spec.hidden_paths
    assert own in spec.needed_paths and options.cache_dir not in spec.needed_paths
    assert spec.rlimits.processes == 64 and spec.rlimits.address_space_bytes == 2048 * 1024 * 1024
    assert spec.rlimits.cpu_s is not None and spec.rlimits.cpu_s > 0


@pytest.mark.parametrize(("exit_code", "errors", "expected"), [
    (125, "", "exceeded its process limit of 64 processes"),
    (128 + signal.SIGXCPU, "", "exceeded its CPU-time limit of"),
    (None, "RuntimeError: DefaultCPUAllocator: can't allocate memory", "exceeded its memory limit of 2.0 GB"),
    (None, "MemoryError", "exceeded its memory limit of 2.0 GB"),
    (None, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "ran out of GPU memory"),
    (None, "BlockingIOError: [Errno 11] Resource temporarily unavailable", "exceeded its process limit of 64"),
    (None, "ValueError: a bug of the problem's own", None),
])
def test_limits_are_named(tmp_path: Path, exit_code: int | None, errors: str, expected: str | None) -> None:
    options = HarnessOptions(cache_dir=tmp_path, memory_limit_mb=2048, process_limit=64)
    spec = problem_sandbox_spec("reference", tmp_path / "w", options, Target.CPU, namespaces=())
    message = limit_message(spec, exit_code, errors)
    assert (message is None) if expected is None else (expected in (message or "")), message


def test_torch_reads_the_compiler_environment_of_a_problem_sandbox(tmp_path: Path) -> None:
    """The variables torch.compile's caches are steered by keep their names in the installed torch:
    the problem's own inductor cache, and no precompiled header (torch would build one in every new
    sandbox's empty temporary directory before looking a kernel up: ~8 CPU-s a warm baseline)."""
    env = {**os.environ, **compiler_cache_env(tmp_path / "caches")}
    read = subprocess.run(
        [sys.executable, "-c", "from torch._inductor import config; from torch._inductor.runtime.cache_dir_utils "
                               "import cache_dir; print(cache_dir(), config.cpp_cache_precompile_headers)"],
        env=env, capture_output=True, text=True, timeout=120)
    assert read.stdout.split() == [str(tmp_path / "caches" / "inductor"), "False"], read.stderr[-2000:]
