"""A build request whose source the builder's compiler refused is answered again from memory for
the rest of the Referee's life, without a builder; a failure that may not recur (the compiler
killed, memory, disk) is built again. Fakes stand in for the sandboxes: what is checked is
`CompileClient`'s bookkeeping (the corpus test runs the real builds: tests/harness/corpus)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from harness import HarnessOptions
from harness.buildcache import is_source_error
from harness.buildcache.records import BuildAnswer
from harness.compiler import CompileClient
from harness.progress import StageReporter
from harness.sandboxpool import SandboxPool
from vocabulary.evaluation import Target
from vocabulary.wire import JsonObject

REFUSED = ("/tmp/x/kl_fast-1a2b/main.cpp: In function 'at::Tensor fast(at::Tensor)':\n"
           "/tmp/x/kl_fast-1a2b/main.cpp:12:5: error: 'undeclared' was not declared in this scope\n"
           "ninja: build stopped: subcommand failed.")
KILLED = ("c++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.\n"
          "ninja: build stopped: subcommand failed.")
REQUEST = {"name": "kl_fast", "cpp_sources": ["int f() { return undeclared; }"], "functions": ["f"]}


class _Process:
    def __init__(self, log: str) -> None:
        self.log, self.requests = log, 0

    def request(self, message: Any, timeout: float) -> JsonObject:
        self.requests += 1
        return BuildAnswer(ok=False, log=self.log, seconds=6.0).to_dict()

    def exit_code(self) -> int | None:
        return None


class _Builder:
    def __init__(self, run_dir: Path, process: _Process) -> None:
        self.run_dir, self.process = run_dir, process

    def wait_ready(self, timeout: float) -> None:
        pass

    def discard(self) -> None:
        pass


class _Pool:
    def __init__(self, builder: _Builder) -> None:
        self.builder, self.taken, self.builder_wanted = builder, 0, False

    def take(self, role: object) -> _Builder:
        self.taken += 1
        return self.builder


def _client(tmp_path: Path, log: str) -> tuple[CompileClient, _Pool]:
    pool = _Pool(_Builder(tmp_path, _Process(log)))
    client = CompileClient(HarnessOptions(cache_dir=tmp_path / "cache"), Target.CPU, cast(SandboxPool, pool),
                           reporter=lambda: StageReporter(None))
    return client, pool


def test_a_refused_source_is_answered_from_memory_without_a_builder(tmp_path: Path) -> None:
    client, pool = _client(tmp_path, REFUSED)
    first = client.build_lazily(dict(REQUEST))
    client.release_builder()
    again = client.build_lazily(dict(REQUEST))
    assert not first.ok and again.log == first.log == REFUSED
    assert pool.builder.process.requests == 1 and pool.taken == 1  # no second build, no second builder
    assert again.seconds == 0.0
    other = client.build_lazily({**REQUEST, "cpp_sources": ["int f() { return 1 + undeclared; }"]})
    assert not other.ok and pool.builder.process.requests == 2  # other bytes are built


@pytest.mark.parametrize("log", [KILLED, "c++: internal compiler error: Segmentation fault signal terminated program",
                                 "main.cpp:1:1: error: no space left on device", "ninja: build stopped"])
def test_a_failure_that_may_not_recur_is_built_again(tmp_path: Path, log: str) -> None:
    client, pool = _client(tmp_path, log)
    client.build_lazily(dict(REQUEST))
    client.build_lazily(dict(REQUEST))
    assert pool.builder.process.requests == 2
    assert not is_source_error(log)
