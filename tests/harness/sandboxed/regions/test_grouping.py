"""Regions as a fusing compiler groups them, on the three example models (captured in-process)."""

from __future__ import annotations

import torch

from harness.sandboxed.regions.grouping import RegionKind, group_regions, short_op
from harness.sandboxed.regions.runtime import capture
from problems import parse_problem
from tests.support.models import example, load_in_process


def _groups(name: str, *, train: bool = False) -> list[tuple[str, list[str], bool]]:
    module = load_in_process(example(name))
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).train(train)
    graph = capture(model, module.get_inputs()).graph
    return [(g.kind.value, [short_op(n) for n in g.nodes], g.lone_vendor_call) for g in group_regions(graph)]


def test_a_pre_norm_mlp_block_is_a_norm_region_then_each_matmul_with_its_epilogue() -> None:
    # Two blocks, three regions each: the layer norm; fc1 with its GELU; fc2 with the residual add.
    block = [("norm", ["layer_norm"], False), ("heavy", ["linear", "gelu"], False), ("heavy", ["linear", "add"], False)]
    assert _groups("mlp_stack") == block * 2


def test_eval_mode_batch_norm_joins_the_convolution_but_train_mode_batch_norm_is_a_reduction_of_its_own() -> None:
    assert _groups("conv_stem") == [("heavy", ["conv2d", "batch_norm", "relu"], False),
                                    ("heavy", ["conv2d", "batch_norm", "add", "relu"], False)]
    trained = _groups("conv_stem", train=True)
    assert [kind for kind, _, _ in trained] == ["heavy", "norm", "heavy", "norm"]
    assert trained[0] == ("heavy", ["conv2d"], True)  # a lone vendor call: nothing after it to fuse


def test_an_attention_block_has_an_attention_core_and_a_lone_projection() -> None:
    assert _groups("attention_block") == [
        ("norm", ["layer_norm"], False),
        ("heavy", ["linear"], True),
        (RegionKind.ATTENTION.value, ["matmul", "mul", "softmax", "matmul"], False),
        ("heavy", ["linear", "add"], False),
    ]


def test_a_residual_add_before_a_norm_joins_it_and_pointwise_chains_stand_alone() -> None:
    source = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
    def forward(self, x, y):
        return torch.tanh(self.norm(x + y) * 2)
def get_inputs(): return [torch.randn(2, 8), torch.randn(2, 8)]
def get_init_inputs(): return []
'''
    module = load_in_process(parse_problem(source, problem_id="chain.py"))
    graph = capture(module.Model(), module.get_inputs()).graph
    assert [(g.kind, [short_op(n) for n in g.nodes]) for g in group_regions(graph)] == [
        (RegionKind.NORM, ["add", "layer_norm", "mul", "tanh"])]
