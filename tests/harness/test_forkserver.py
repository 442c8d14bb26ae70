"""The fork server (`harness.forkserver`): the CPU sandboxes that run candidate code are forked from
one process per Referee, confined by the same warden as a started one, and gone with it.

What a forked sandbox can reach is the adversarial suite's (tests/harness/integrity: every probe
runs in forked sandboxes, one of them for the descriptors it could have inherited) and the tenancy
suites'; here: that the pool forks them, what they report, and that nothing outlives a close or a
server that died."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import HarnessOptions
from harness.sandboxpool import SandboxPool, SandboxRole
from tests.support.processes import descendants
from vocabulary.evaluation import Target


@pytest.fixture
def options(harness_cache: Path) -> HarnessOptions:
    return HarnessOptions(cache_dir=harness_cache, secret_seed=1)


@pytest.fixture
def runs_root(options: HarnessOptions, tmp_path: Path) -> Iterator[Path]:
    root = options.runs_dir / f"forkserver-test-{tmp_path.name}"
    root.mkdir(parents=True)
    yield root
    assert descendants(os.getpid()) == [], "a sandbox or the fork server outlived its pool"


def test_cpu_sandboxes_are_forked_and_report_the_namespaces_a_started_one_gets(
        options: HarnessOptions, runs_root: Path) -> None:
    forking = SandboxPool(options, Target.CPU, runs_root)
    starting = SandboxPool(options.replace(fork_server=False), Target.CPU, runs_root)
    try:
        forked = [forking.start(role) for role in (SandboxRole.COMPILE, SandboxRole.CANDIDATE, SandboxRole.BUILDER)]
        started = starting.start(SandboxRole.CANDIDATE)
        for sandbox in [*forked, started]:
            sandbox.wait_ready(120)
        assert [s.process.forked for s in forked] == [True, True, True]
        assert not started.process.forked
        assert {s.process.sandbox_report.namespaces for s in forked} == {started.process.sandbox_report.namespaces}
        assert started.process.sandbox_report.namespaces  # where the OS allows none, both say so
        # One server, its own process; each sandbox a session of its own, not the server's.
        assert len({os.getsid(s.process.pid) for s in forked}) == 3
    finally:
        forking.close()
        starting.close()
        for sandbox in [*forked, started]:
            sandbox.discard()
    assert all(s.process.exit_code(5) is not None for s in forked)


def test_closing_the_pool_ends_the_server_and_every_sandbox_it_forked(
        options: HarnessOptions, runs_root: Path) -> None:
    pool = SandboxPool(options, Target.CPU, runs_root)
    pool.prestart()
    spares = pool.prestarted
    assert set(spares) == {"compile", "candidate", "builder"}
    pool.close()
    for pid in spares.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not (runs_root / "forkserver").exists()  # its directory goes with it (it ended when told)


def test_a_server_that_died_is_replaced_by_started_sandboxes(options: HarnessOptions, runs_root: Path) -> None:
    pool = SandboxPool(options, Target.CPU, runs_root)
    try:
        first = pool.start(SandboxRole.CANDIDATE)
        first.wait_ready(120)
        server = pool._fork_server
        assert server is not None and server._process is not None
        os.kill(server._process.pid, signal.SIGKILL)
        assert first.process.exit_code(10) is not None  # its wardens die with it
        second = pool.start(SandboxRole.CANDIDATE)
        second.wait_ready(120)
        assert not second.process.forked  # started the usual way, not lost
        third = pool.start(SandboxRole.CANDIDATE)  # and the next request starts a new server
        third.wait_ready(120)
        assert third.process.forked
        for sandbox in (first, second, third):
            sandbox.discard()
    finally:
        pool.close()


def test_cuda_sandboxes_are_never_forked(options: HarnessOptions, runs_root: Path) -> None:
    pool = SandboxPool(options, Target.CUDA, runs_root)
    assert pool._fork_server is None
    pool.close()
