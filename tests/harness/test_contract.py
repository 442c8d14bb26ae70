"""How the reference's weights go into ModelNew: by name, else by registration order (KernelBench's
semantics: both models built from the same seed), else an error listing both sets side by side."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.sandboxed import contract


class Model(nn.Module):
    """Seed problem 2's shape: a conv created before a parameter, then a BatchNorm (its buffers,
    one of them not floating)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.scale = nn.Parameter(torch.ones(4, 1, 1))
        self.bn = nn.BatchNorm2d(4)


def ordered(build: type[nn.Module]) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    with contract.registrations() as ranks:
        model = build()
    return model, contract.in_registration_order(model, model.state_dict(), ranks)


def reference() -> dict[str, torch.Tensor]:
    with contract.registrations() as ranks:
        model = Model()
    return contract.in_registration_order(model, contract.redraw_weights(model, 7), ranks)


def test_registration_order_puts_a_submodule_where_it_was_created() -> None:
    # state_dict lists a module's own parameters before its children's: scale first.
    assert next(iter(Model().state_dict())) == "scale"
    assert list(reference()) == ["conv.weight", "conv.bias", "scale", "bn.weight", "bn.bias", "bn.running_mean",
                                 "bn.running_var", "bn.num_batches_tracked"]


def test_the_same_names_load_by_name_and_extra_keys_are_fine() -> None:
    class Same(Model):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("folded", torch.zeros(4))

    weights = reference()
    _, state = ordered(Same)
    loading = contract.reference_weights_for(weights, state)
    assert loading.renamed == () and loading.state.keys() == weights.keys()


def test_renamed_weights_created_in_the_same_order_load_by_order() -> None:
    class Renamed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.empty(4, 3, 3, 3))
            self.b = nn.Parameter(torch.empty(4))
            self.s = nn.Parameter(torch.empty(4, 1, 1))
            self.gamma = nn.Parameter(torch.empty(4))
            self.beta = nn.Parameter(torch.empty(4))
            self.register_buffer("mean", torch.empty(4))
            self.register_buffer("var", torch.empty(4))

    weights = reference()
    model, state = ordered(Renamed)
    loading = contract.reference_weights_for(weights, state)
    assert loading.renamed == (("conv.weight", "w"), ("conv.bias", "b"), ("scale", "s"), ("bn.weight", "gamma"),
                               ("bn.bias", "beta"), ("bn.running_mean", "mean"), ("bn.running_var", "var"))
    model.load_state_dict(loading.state, strict=False)
    assert torch.equal(model.w, weights["conv.weight"]) and torch.equal(model.var, weights["bn.running_var"])
    assert torch.equal(model.s, weights["scale"])


def test_anything_else_lists_both_sets_side_by_side() -> None:
    class Wrong(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.empty(4, 3, 3, 3))
            self.b = nn.Parameter(torch.empty(4, 1))

    with pytest.raises(contract.WeightsMismatch) as mismatch:
        contract.reference_weights_for(reference(), ordered(Wrong)[1])
    lines = str(mismatch.value).splitlines()
    assert lines[1].split() == ["#", "Model", "ModelNew"]
    assert lines[2].split() == ["0", "conv.weight", "(4,", "3,", "3,", "3)", "w", "(4,", "3,", "3,", "3)"]
    assert lines[3].endswith("b (4, 1)   <- differs") and lines[4].endswith("-   <- missing")
    assert "created in the same order with the same shape" in lines[-1]
