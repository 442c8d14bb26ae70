"""End to end on the CPU target: real compiles, sandboxes, real verdicts.

Every misbehaving candidate here is the seed-1 CPU example with ModelNew.forward overridden, so
its extension sources are byte-identical and one build serves them all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee, Timeouts, TimingOptions
from problems import load_problem
from tests.support.paths import REPO
from tests.support.processes import processes_with_arg
from vocabulary.evaluation import Depth
from vocabulary.timing import Baselines, Timing
from vocabulary.verdict import Stage, Status

pytestmark = pytest.mark.slow

SEED1_CPU = (REPO / "examples" / "seed1_cpu.py").read_text()
QUICK_TIMING = TimingOptions(warmup_ms=5, min_repeats=5, max_time_s=0.3, input_sets=2)


def override_forward(body: str) -> str:
    """The seed-1 example with a forward that misbehaves (same extension, same build)."""
    return SEED1_CPU + "\n\nclass ModelNew(ModelNew):\n    def forward(self, x):\n" + textwrap.indent(
        textwrap.dedent(body), "        ") + "\n"


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _descends_from_us(pid: int) -> bool:
    """Whether ``pid`` was started (through its warden) by this test process: other pytest-xdist
    workers and other checkouts run sandboxes on the same host."""
    for _ in range(4):
        pid = _parent(pid)
        if pid == os.getpid():
            return True
        if pid <= 1:
            return False
    return False


def roles_running(role: str, besides: Referee | None = None) -> list[int]:
    """Sandboxes of this role that this test process started, other than the ones
    ``besides`` started for its next attempt."""
    wardens = set(besides.prestarted.values()) if besides is not None else set()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                ours = b"harness.sandboxed.roles" in cmdline and role.encode() in cmdline and \
                    _parent(int(entry)) not in wardens and _descends_from_us(int(entry))
            except (OSError, ValueError, IndexError):
                continue
            if ours:
                found.append(int(entry))
    return found


def gone_soon(running: Callable[[], list[int]], within_s: float = 5.0) -> bool:
    """Whether ``running()`` is empty within a few seconds: a SIGKILLed process can take a moment
    to be torn down (a sandbox imports torch: a large address space to release)."""
    deadline = time.monotonic() + within_s
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not running()


@pytest.fixture(scope="module")
def options(harness_cache: Path) -> HarnessOptions:
    return HarnessOptions(cache_dir=harness_cache, secret_seed=1234, compile_baseline=False, timing=QUICK_TIMING,
                          timeouts=Timeouts(trial_s=8.0, load_s=60.0, timing_s=60.0))


@pytest.fixture(scope="module")
def referee(options: HarnessOptions) -> Iterator[Referee]:
    with Referee(load_problem("level2/conv_tanh_scale_bias_maxpool"), "cpu", options) as ref:
        yield ref


def test_correct_candidate_passes_with_timing_and_speedups(referee: Referee) -> None:
    verdict = referee.evaluate(SEED1_CPU)
    assert verdict.status is Status.PASS, verdict.message + verdict.log
    assert verdict.stage is Stage.DONE and verdict.error_kind is None
    assert verdict.compiled and verdict.correct
    kinds = [t.kind for t in verdict.trials]
    assert kinds.count("random") == 3 and "variant" in kinds and "shape:0" in kinds
    assert all(t.max_abs_err is not None and t.max_abs_err < 1e-4 for t in verdict.trials)
    assert verdict.timing is not None and verdict.timing.n >= 5 and verdict.timing.median_ms > 0
    assert verdict.baselines is not None and verdict.baselines.eager is not None
    assert verdict.speedup_vs_eager is not None and verdict.speedup_vs_eager > 0
    assert verdict.sol_ms is not None and verdict.pct_of_sol > 0
    assert verdict.flops and verdict.flops > 0
    prov = verdict.provenance
    assert prov.target == "cpu" and prov.mode == "train" and prov.torch
    assert prov.seeds and "1234" not in prov.seeds
    assert verdict.compile is not None and verdict.compile.extensions[0].name == "kl_seed1_cpu"


def test_python_only_edit_reuses_the_build(referee: Referee) -> None:
    verdict = referee.evaluate(SEED1_CPU + "\n# a comment changes nothing in the extension\n")
    assert verdict.status is Status.PASS
    assert verdict.compile is not None and all(e.cached for e in verdict.compile.extensions)
    assert verdict.compile.seconds < 10


def test_wrong_candidate_fails_with_per_trial_errors(referee: Referee) -> None:
    verdict = referee.evaluate((REPO / "examples" / "seed1_cpu_wrong.py").read_text())
    assert verdict.status is Status.FAIL and verdict.stage is Stage.CORRECTNESS
    assert verdict.error_kind is None and verdict.timing is None
    failed = [t for t in verdict.trials if not t.passed]
    assert failed and all(t.max_abs_err and t.max_abs_err > 1e-4 and t.mismatch_frac > 0 for t in failed)
    assert "trials failed" in verdict.message


def test_compile_error_comes_back_with_file_and_line(referee: Referee) -> None:
    verdict = referee.evaluate((REPO / "examples" / "seed1_cpu_compile_error.py").read_text())
    assert verdict.status is Status.ERROR and verdict.stage is Stage.COMPILE
    assert verdict.error_kind.value == "candidate"
    assert verdict.compile is not None and not verdict.compile.ok
    first = verdict.compile.errors.splitlines()[1]
    assert first.startswith("main.cpp:") and ": error:" in first, verdict.compile.errors


def test_hanging_candidate_is_killed_within_its_timeout(referee: Referee) -> None:
    verdict = referee.evaluate(override_forward("while True:\n    pass"))
    assert verdict.status is Status.ERROR and verdict.stage is Stage.CORRECTNESS
    assert verdict.error_kind.value == "candidate" and "timed out" in verdict.message
    # The trials' stage, not the whole evaluation: run alone, this test also compiles the extension.
    elapsed = verdict.stage_seconds.correctness
    assert elapsed is not None and elapsed < referee.options.timeouts.trial_s + 30
    assert gone_soon(lambda: roles_running("candidate", besides=referee))
    # The next attempt's, started already (and the builder's, after a build: run alone, it built one).
    assert {"compile", "candidate"} <= set(referee.prestarted)


def test_the_next_attempt_runs_in_sandboxes_started_for_it(referee: Referee, options: HarnessOptions) -> None:
    """After an attempt the Referee holds a compile and a candidate sandbox for the next one; the next
    attempt uses them (a source compiled before needs no compile sandbox, so that one stays), each
    serves one attempt, and with ``prestart=False`` nothing is left running between attempts."""
    assert referee.evaluate(SEED1_CPU, depth=Depth.CORRECTNESS).status is Status.PASS
    before = referee.prestarted
    assert set(before) == {"compile", "candidate"}
    assert referee.evaluate(SEED1_CPU, depth=Depth.CORRECTNESS).status is Status.PASS
    after = referee.prestarted
    assert after["compile"] == before["compile"] and after["candidate"] != before["candidate"]
    assert gone_soon(lambda: [p for p in (before["candidate"],) if Path(f"/proc/{p}").exists()])
    problem = load_problem("level2/conv_tanh_scale_bias_maxpool")
    with Referee(problem, "cpu", options.replace(prestart=False)) as plain:
        assert plain.evaluate(SEED1_CPU, depth=Depth.CORRECTNESS).status is Status.PASS
        assert plain.prestarted == {}


def test_segfault_is_reported_and_the_next_evaluation_works(referee: Referee) -> None:
    verdict = referee.evaluate(override_forward("import ctypes\nreturn ctypes.string_at(0)"))
    assert verdict.status is Status.ERROR and verdict.error_kind.value == "candidate"
    assert "SIGSEGV" in verdict.message
    assert referee.evaluate(SEED1_CPU).status is Status.PASS


def test_escaping_descendants_die_with_the_sandbox(referee: Referee) -> None:
    token = f"{os.getpid()}.{time.time_ns() % 100000}"
    verdict = referee.evaluate(override_forward(f"""
        import os, subprocess
        if os.fork() == 0:          # double fork + setsid: no longer our child or in our session
            os.setsid()
            subprocess.Popen(["sleep", "{token}"], start_new_session=True)
            os._exit(0)
        subprocess.Popen(["sleep", "{token}"], start_new_session=True)
        while True:
            pass"""))
    assert verdict.status is Status.ERROR and "timed out" in verdict.message
    deadline = time.monotonic() + 5
    while processes_with_arg(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with_arg(token) == []


def test_candidate_sees_no_secret_and_no_network(harness_cache: Path, tmp_path: Path) -> None:
    """A worker with a secret in its environment: the candidate finds it nowhere."""
    canary = f"kl-canary-{time.time_ns()}"
    probe = override_forward(f"""
        import glob, os, socket
        found = [k for k, v in os.environ.items() if "{canary}" in v]
        for path in glob.glob("/proc/*/environ"):
            try:
                if b"{canary}" in open(path, "rb").read():
                    found.append(path)
            except OSError:
                pass
        for port in (5432, 6379):
            s = socket.socket()
            s.settimeout(0.5)
            try:
                s.connect(("127.0.0.1", port))
                found.append(f"connected to {{port}}")
            except OSError:
                pass
            finally:
                s.close()
        if found:
            raise RuntimeError(f"sandbox leak: {{found}}")
        return super(type(self), self).forward(x)""")
    candidate = tmp_path / "probe.py"
    candidate.write_text(probe)
    script = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from harness import HarnessOptions, TimingOptions, evaluate
        from problems import load_problem
        assert "{canary}" in open(f"/proc/{{os.getpid()}}/environ").read()  # the canary is really there
        options = HarnessOptions(cache_dir=Path({str(harness_cache)!r}), compile_baseline=False,
                                 timing=TimingOptions(warmup_ms=5, min_repeats=5, max_time_s=0.2))
        verdict = evaluate(load_problem("level2/conv_tanh_scale_bias_maxpool"), Path({str(candidate)!r}).read_text(),
                           "cpu", options)
        print(verdict.status.value, verdict.message.replace(chr(10), " "))
    """)
    env = {**os.environ, "KL_SECRET_API_KEY": canary, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("pass"), result.stdout


def test_a_killed_build_leaves_nothing_behind(options: HarnessOptions, referee: Referee) -> None:
    """A compile killed mid-build (its time limit) publishes no partial build and blocks no later one;
    the sandboxes its Referee started for a next attempt end with it (``referee``: the module's, alive)."""
    source = (REPO / "examples" / "seed1_cpu_compile_error.py").read_text()
    problem = load_problem("level2/conv_tanh_scale_bias_maxpool")
    hurried = options.replace(timeouts=Timeouts(compile_s=4.0))
    with Referee(problem, "cpu", hurried) as hurrying:
        killed = hurrying.evaluate(source)
    assert killed.stage is Stage.COMPILE and "timed out" in killed.compile.errors
    assert not list(options.builds_dir.glob("kl_seed1_cpu_compile_error-*"))
    assert gone_soon(lambda: roles_running("compile", besides=referee)), "a compile sandbox outlived its Referee"
    with Referee(problem, "cpu", options) as again:
        verdict = again.evaluate(source)
    assert verdict.stage is Stage.COMPILE and "main.cpp:" in verdict.compile.errors


def test_baselines_come_from_the_cache_unless_reuse_is_off(options: HarnessOptions, tmp_path: Path) -> None:
    """A cache entry under the Referee's provenance key is read back as is; with
    ``reuse_baselines=False`` (a replay) eager is timed afresh and the entry is left alone."""
    cached = options.replace(cache_dir=tmp_path)
    problem = load_problem("level1/gelu_tanh")
    planted = Baselines(eager=Timing.from_samples([123.0] * 5, clock="planted"), torch_compile=None)
    with Referee(problem, "cpu", cached) as reusing:
        reusing.start_reference()
        entry = cached.baselines_dir / f"{reusing.baseline_key()}.json"
        entry.write_text(json.dumps(planted.to_dict()))
        assert reusing.baselines().eager.median_ms == 123.0
    with Referee(problem, "cpu", cached.replace(reuse_baselines=False)) as fresh:
        assert fresh.baselines().eager.median_ms < 100.0
    assert json.loads(entry.read_text()) == planted.to_dict()
