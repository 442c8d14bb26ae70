"""A user's own problem file through ``kernelloop problems check`` (issue 24, item 10): the installed
command, on files written from scratch.

Before: a file lacking a name got "a problem must define Model, get_inputs, get_init_inputs"
(which one? where is the format?), and a problem whose forward took 763 ms on the CPU was admitted
without a word about ``CPU_SIZES``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.admission import SLOW_CPU_FORWARD_MS
from tests.support.cli import KERNELLOOP_COMMAND, pythonpath

#: Written as a newcomer does: the model class under another name, no get_init_inputs.
LACKING = '''import torch
import torch.nn as nn


class MyModel(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 64)]
'''

#: A problem whose forward is slow on the CPU (its full size, as KernelBench files are): the sleep
#: stands for the work, so that the test does not load a shared machine.
SLOW = f'''import time

import torch
import torch.nn as nn

batch_size, features = 64, 256


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        time.sleep({2 * SLOW_CPU_FORWARD_MS / 1000})
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''


def _run(args: list[str], tmp_path: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES") and not k.startswith("KERNELLOOP_")}
    env.update(PYTHONPATH=pythonpath(), HOME=str(tmp_path / "home"), KERNELLOOP_CACHE_DIR=str(cache))
    return subprocess.run([str(KERNELLOOP_COMMAND), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def test_a_file_lacking_names_is_told_which_and_where_the_format_is(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(LACKING)
    done = _run(["problems", "check", "mine.py", "--target", "cpu"], tmp_path, tmp_path / "cache")
    said = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert "mine.py: the problem lacks Model and get_init_inputs at module level" in said, said
    assert "docs/problems.md" in said and "'MyModel' is defined: rename it Model?" in said
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_slow_forward_is_admitted_with_the_advice_to_declare_cpu_sizes(tmp_path: Path,
                                                                         harness_cache: Path) -> None:
    (tmp_path / "slow_problem.py").write_text(SLOW)
    done = _run(["problems", "check", "slow_problem.py", "--target", "cpu"], tmp_path, harness_cache)
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stdout.split())
    assert "suggestion for slow_problem: one forward takes" in said, said
    assert "ms on the cpu" in said and "declare CPU_SIZES" in said and "docs/problems.md" in said
    # The advice is data of the admission result, for scripts too.
    done = _run(["problems", "check", "slow_problem.py", "--target", "cpu", "--json"], tmp_path, harness_cache)
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["admitted"] is True and report["forward_ms"] > SLOW_CPU_FORWARD_MS
    assert len(report["suggestions"]) == 1 and "CPU_SIZES" in report["suggestions"][0]
