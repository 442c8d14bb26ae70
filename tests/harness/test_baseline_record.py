"""A baselines figure that disagrees with what the machine measured before is re-taken and never
cached (issue 24, item 4: a replay timed eager at 39.9 ms instead of 0.13 ms, with a tight spread,
and cached it: "428x faster" on every later run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import HarnessOptions, Referee, TimingOptions
from harness.baselinerecord import AGREEMENT_RATIO, MAX_RETAKES, BaselineRecord, agrees, measure_consistently
from harness.problemsandbox import compiler_cache_dir
from problems import parse_problem
from vocabulary.timing import HOST_LOADED_WARNING, Baselines, Timing

#: Sleeps instead of computing, so its time hardly depends on the host's load: 50 ms a call, or
#: 500 ms while a ``slow`` file sits beside its compiler caches (the host "busy" on purpose; the
#: reference sandbox sees that directory and no other).
SLOWED_ON_PURPOSE = '''"""Sleeps 50 ms a forward (500 ms while a "slow" file is beside its compiler caches)."""
import os
import time
import torch
import torch.nn as nn

SLOW = os.path.join(os.path.dirname(os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/nonexistent/x")), "slow")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        time.sleep(0.5 if os.path.exists(SLOW) else 0.05)
        return x * self.scale


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''

QUICK = TimingOptions(warmup_ms=5, min_warmup_calls=1, min_repeats=5, max_time_s=1.0, input_sets=1)


def timing(ms: float, *warnings: str) -> Timing:
    return Timing.from_samples([ms] * 5, clock="perf_counter", warnings=warnings)


def test_figures_agree_within_the_ratio_and_only_another_request_confirms(tmp_path: Path) -> None:
    fast, near, slow = (Baselines(eager=timing(ms), torch_compile=None) for ms in (0.13, 0.13 * AGREEMENT_RATIO, 39.9))
    assert agrees(fast, near) and not agrees(fast, slow)
    assert not agrees(fast, Baselines(eager=timing(0.13), torch_compile=timing(0.1)))  # one has torch.compile
    first, second = BaselineRecord(tmp_path, "k", "job-1"), BaselineRecord(tmp_path, "k", "job-2")
    first.add(slow)
    assert not first.confirmed(slow)  # its own figures never confirm each other
    assert second.confirmed(slow) and not second.confirmed(fast)
    BaselineRecord(tmp_path, "k", "job-0").add(fast)
    assert not second.confirmed(slow) and second.confirmed(fast)  # judged by the fastest figure
    spread = Baselines(eager=timing(0.14, "noisy: interquartile range 40% of the median"), torch_compile=None)
    assert not second.confirmed(spread) and second.agreeing(spread)  # used, never cached
    # a loaded host alone is no reason: agreeing with another time's figure is the evidence
    assert second.confirmed(Baselines(eager=timing(0.14, f"{HOST_LOADED_WARNING} (load 5.0)"), torch_compile=None))


def test_the_issue_figures_a_poisoned_eager_is_retaken_and_the_machines_figure_used(tmp_path: Path) -> None:
    """0.13 ms measured before; a busy replay measures 39.9 ms (tight) three times: the job uses
    0.13 and caches nothing, and so does the next busy one; a later quiet job's 0.14 is confirmed."""
    def job(request: str, *figures: float) -> tuple[Baselines, bool, int]:
        script = iter(Baselines(eager=timing(ms), torch_compile=None) for ms in figures)
        calls = []

        def measure() -> Baselines:
            calls.append(1)
            return next(script)

        chosen, confirmed = measure_consistently(BaselineRecord(tmp_path, "k", request), measure, keep=True)
        return chosen, confirmed, len(calls)

    first, confirmed, calls = job("job-1", 0.13)
    assert first.eager.median_ms == 0.13 and not confirmed and calls == 1  # nothing to confirm it yet
    busy, confirmed, calls = job("replay", 39.9, 39.9, 39.9)
    assert busy.eager.median_ms == 0.13 and not confirmed and calls == 1 + MAX_RETAKES
    assert "disagreeing with this machine's earlier 0.13 ms" in busy.notes[-1]
    busy_again, confirmed, _ = job("replay-2", 39.9, 39.9, 39.9)  # two busy jobs never confirm each other
    assert busy_again.eager.median_ms == 0.13 and not confirmed
    recovered, confirmed, calls = job("replay-3", 39.9, 0.14)
    assert recovered.eager.median_ms == 0.14 and confirmed and calls == 2  # re-taken once, then it agrees
    # A replay (keep=False) is judged by the record but adds nothing to it.
    before = len(BaselineRecord(tmp_path, "k", "x").earlier())
    chosen, _ = measure_consistently(BaselineRecord(tmp_path, "k", "replay-4"),
                                     lambda: Baselines(eager=timing(0.13), torch_compile=None), keep=False)
    assert chosen.eager.median_ms == 0.13 and len(BaselineRecord(tmp_path, "k", "x").earlier()) == before


@pytest.mark.slow
def test_a_baseline_slowed_on_purpose_is_retaken_and_never_cached(tmp_path: Path) -> None:
    options = HarnessOptions(cache_dir=tmp_path, secret_seed=7, compile_baseline=False, timing=QUICK, trials=1)
    problem = parse_problem(SLOWED_ON_PURPOSE, problem_id="test/slowed")
    slow_file = compiler_cache_dir(options, problem.sha256) / "slow"

    def measure() -> tuple[Baselines, Path, list[float]]:
        with Referee(problem, "cpu", options) as referee:
            baselines = referee.baselines()
            key = referee.baseline_key()
        (record,) = (options.baselines_dir / "record").glob(f"{key}-*.json")
        recorded = [f["baselines"]["eager_ms"] for f in json.loads(record.read_text())]
        return baselines, options.baselines_dir / f"{key}.json", recorded

    # 1. The first figure on this machine is used, not cached: nothing confirms it yet.
    first, entry, recorded = measure()
    assert 49 < first.eager.median_ms < 150 and not entry.exists() and len(recorded) == 1
    assert any("cached once a later job" in note for note in first.notes)

    # 2. The host is "busy": 500 ms, tight. It disagrees with the record, so it is re-taken; no
    #    re-take agrees, so the machine's fastest figure is used and nothing is cached.
    slow_file.parent.mkdir(parents=True, exist_ok=True)
    slow_file.write_text("")
    busy, entry, recorded = measure()
    assert busy.eager.median_ms < 150, busy.notes  # not 500: the earlier figure
    assert not entry.exists()
    assert len(recorded) == 2 + MAX_RETAKES and all(ms > 490 for ms in recorded[1:])
    assert any("disagreeing with this machine's earlier" in note and "nothing is cached" in note
               for note in busy.notes), busy.notes

    # 3. The host is quiet again: the figure agrees with the first job's, and is cached. A figure
    #    whose own samples spread widely is not (a loaded CI host: one sample 58 ms of 50), so a
    #    noisy one is measured again, as the next job would.
    slow_file.unlink()
    for _ in range(3):
        quiet, entry, recorded = measure()
        if not quiet.eager.spread_noisy:
            break
    assert 49 < quiet.eager.median_ms < 150 and entry.exists(), (quiet.notes, quiet.eager.warnings)
    assert Baselines.from_dict(json.loads(entry.read_text())).eager.median_ms == quiet.eager.median_ms

    # 4. Later jobs read the cache: the busy figures never reached it.
    cached, _, _ = measure()
    assert cached.eager.median_ms == quiet.eager.median_ms
