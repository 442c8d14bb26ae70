"""Every bundled problem passes admission on the CPU target (`make test` admits seven, `make test-examples`
the rest); broken problems are refused with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import HarnessOptions
from harness.admission import admit
from problems import bundled_problems, parse_problem

pytestmark = pytest.mark.slow

TEMPLATE = '''
import torch
import torch.nn as nn
MODE = "train"
n = 8
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
    def forward(self, x):
        return {body}
def get_inputs():
    return [torch.randn(4, n)]
def get_init_inputs():
    return [n]
'''


#: The bundled problems `make test` admits, one sandbox each: a plain one, bf16, one without extra
#: shapes, both seed problems (train mode, an inert weight, eval mode) and the largest of level 3.
#: The others are admitted by `make test-examples`; tests/problems/test_bundled.py runs every one
#: in `make test` (in one process: its forward, determinism, inputs and weights that matter, time).
IN_MAKE_TEST = {"level1/softmax", "level1/matmul_bf16", "level1/max_reduction", "level2/conv_tanh_scale_bias_maxpool",
                "level2/conv_bn_scale_train", "level2/conv_bn_scale_eval", "level3/transformer_block"}


@pytest.fixture(scope="module")
def options(harness_cache: Path) -> HarnessOptions:
    return HarnessOptions(cache_dir=harness_cache, secret_seed=7)


@pytest.mark.parametrize("problem", [
    pytest.param(p, id=p.id, marks=() if p.id in IN_MAKE_TEST else pytest.mark.examples) for p in bundled_problems()])
def test_bundled_problem_is_admitted_on_cpu(problem, options: HarnessOptions) -> None:
    report = admit(problem, "cpu", options)
    assert report.admitted, report.reasons
    assert report.forward_ms is not None and report.forward_ms < 500


@pytest.mark.parametrize(("body", "reason"), [
    ("x * self.w + torch.rand_like(x)", "declare RANDOM = True"),
    ("torch.zeros_like(x) + self.w", "two different inputs give the same output"),
    ("x * 2", "re-drawn weights give the same output"),
    ("(x * self.w) * 1e-9", "an all-zeros output passes the tolerance"),
    ("undefined_name(x)", "the problem failed to run"),
])
def test_meaningless_problems_are_refused_with_the_reason(body: str, reason: str, options: HarnessOptions) -> None:
    problem = parse_problem(TEMPLATE.format(body=body), problem_id="user/bad")
    report = admit(problem, "cpu", options)
    assert not report.admitted
    assert any(reason in r for r in report.reasons), report.reasons
