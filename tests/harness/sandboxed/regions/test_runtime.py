"""The patch: regions replaced by kernels bound to the model's own parameters, its state dict unchanged."""

from __future__ import annotations

import pytest
import torch

from harness.sandboxed.regions.grouping import group_regions
from harness.sandboxed.regions.runtime import PatchError, bind_parameters, capture, install, node_targets
from tests.support.models import example, load_in_process


class Doubling(torch.nn.Module):
    """A "kernel" for a layer norm region that is wrong on purpose (so the patch is seen to run)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm_weight = torch.nn.Parameter(torch.empty(256))
        self.norm_bias = torch.nn.Parameter(torch.empty(256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * torch.nn.functional.layer_norm(x, (256,), self.norm_weight, self.norm_bias)


def _model():
    module = load_in_process(example("mlp_stack"))
    torch.manual_seed(0)
    return module.Model(*module.get_init_inputs()).eval(), module.get_inputs()


def test_a_patched_region_uses_the_models_own_weights_and_keeps_its_state_dict() -> None:
    model, inputs = _model()
    graph = capture(model, inputs).graph
    first_norm = group_regions(graph)[0]
    keys = list(model.state_dict())
    region = {"name": "r1", "kind": "r1", "unit": "", "nodes": [n.name for n in first_norm.nodes],
              "targets": [node_targets(graph)[n.name] for n in first_norm.nodes],
              "params": ["norm_weight", "norm_bias"]}
    with torch.no_grad():
        plain = model(*inputs)
        install(model, [region], {"r1": Doubling})
        patched = model(*inputs)
        assert list(model.state_dict()) == keys  # nothing of the kernel is in it
        assert not torch.allclose(plain, patched)  # the kernel runs in place of the region
        model.blocks[0].norm.weight.mul_(0)  # the kernel reads the model's weight itself, not a copy
        zeroed = model(*inputs)
    assert not torch.allclose(zeroed, patched)


def test_a_graph_that_differs_from_the_profiled_one_is_refused_by_name() -> None:
    model, inputs = _model()
    region = {"name": "r9", "kind": "r9", "unit": "", "nodes": ["linear"], "targets": ["aten.conv2d.default"],
              "params": []}
    install(model, [region], {"r9": Doubling})
    wrong = r"node linear is aten\.linear\.default here, aten\.conv2d\.default when profiled"
    with pytest.raises(PatchError, match=wrong):
        model(*inputs)


def test_kernel_parameters_bind_by_name_else_by_order_else_the_error_lists_both() -> None:
    weight, bias = torch.nn.Parameter(torch.ones(256)), torch.nn.Parameter(torch.zeros(256))
    named = Doubling()
    bind_parameters(named, {"norm_weight": weight, "norm_bias": bias})
    assert named.norm_weight is weight and named.norm_bias is bias

    class Renamed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.g = torch.nn.Parameter(torch.empty(256))
            self.b = torch.nn.Parameter(torch.empty(256))

    renamed = Renamed()
    bind_parameters(renamed, {"norm_weight": weight, "norm_bias": bias})
    assert renamed.g is weight and renamed.b is bias
    with pytest.raises(PatchError, match=r"neither by name nor in order"):
        bind_parameters(Renamed(), {"norm_weight": torch.nn.Parameter(torch.ones(8))})
