"""The own-model tests' models: the three example models (``examples/models/``) with their region
kernels, models that fail to build or to be captured, and the example models loaded in-process
at their CPU sizes (for the sandbox-side tests, which run torch here)."""

from __future__ import annotations

import types
from pathlib import Path

from problems import Problem, parse_problem
from tests.support.paths import REPO
from vocabulary.wire import JsonObject

EXAMPLES = REPO / "examples" / "models"
KERNELS = EXAMPLES / "kernels"
#: The three kinds the tests cover: a stack of pre-norm MLP blocks, a conv stem with eval-mode
#: batch norm and a residual, an attention block.
MODELS = ("mlp_stack", "conv_stem", "attention_block")

#: A model whose constructor raises (its line must be named).
BROKEN_BUILD = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        raise ValueError("dim must be even")


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8]
'''

#: Control flow on a tensor's values in its forward: only its submodules can be captured.
DATA_DEPENDENT = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        y = self.norm(x)
        if y.sum() > 0:
            return self.fc(y)
        return self.fc(y) * 2


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''

#: Nothing in it can be captured: its one module branches on its input's values.
UNTRACEABLE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if x.max() > 0.5:
            return x * 2
        return x - 1


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''


def model_path(name: str) -> Path:
    return EXAMPLES / f"{name}.py"


def example(name: str) -> Problem:
    """An example model as the harness parses it (its id is its file name, as the CLI gives it)."""
    return parse_problem(model_path(name).read_text(), problem_id=f"{name}.py")


def kernels(name: str) -> dict[str, str]:
    """The example model's region kernels by region name."""
    return {p.stem: p.read_text() for p in sorted((KERNELS / name).glob("*.py"))}


def load_in_process(problem: Problem) -> types.ModuleType:
    """The model's module at its CPU sizes, loaded here (the sandbox-side tests run torch in-process)."""
    from harness.sandboxed.roles.loading import load_problem_module

    return load_problem_module(problem, "cpu")


def _region_source(name: str) -> str:
    return (f'"""Region {name}."""\nimport torch\nimport torch.nn as nn\n\nMODE = "eval"\n\n\n'
            "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n\n"
            "def get_inputs():\n    return [torch.randn(4, 8)]\n\n\ndef get_init_inputs():\n    return []\n")


def fake_profile(target: str = "cpu", shares: tuple[float, ...] = (0.2, 0.5, 0.3)) -> JsonObject:
    """A `ModelProfile` of the MLP example as JSON, made up (no torch): region names the scripted
    LLM has scripts for, sources that parse as problems."""
    from vocabulary.regionplan import Boundary, CaptureReport, ModelProfile, Region, RegionInstance

    names = ("r1_layer_norm", "r2_linear_gelu", "r3_linear_add")[: len(shares)]
    regions = tuple(
        Region(name=name, kind="heavy", ops=tuple(name.split("_")[1:]), lone_vendor_call=False,
               instances=(RegionInstance("", (f"n{k}",), ("aten.relu.default",), (), (), (f"blocks.{k}",)),),
               inputs=(Boundary("(4, 8)", (4, 8), (4, 8), "float32"),),
               outputs=(Boundary("(4, 8)", (4, 8), (4, 8), "float32"),), params=(), source=_region_source(name),
               time_ms=10 * share, share=share, eager_ms=1.0, compile_ms=0.5)
        for k, (name, share) in enumerate(zip(names, shares, strict=True)))
    profile = ModelProfile(model="mlp_stack.py", target=target, mode="eval", device="test cpu", model_ms=12.0,
                           compile_ms=9.0, attributed_ms=10.0, regions=regions,
                           capture=CaptureReport("torch.export", True, ("",)))
    return profile.to_dict()
