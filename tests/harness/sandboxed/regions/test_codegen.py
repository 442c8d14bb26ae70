"""A region as a problem: the model's own operations, its parameters, sizes that follow the model's."""

from __future__ import annotations

import ast

import sympy
import torch

from harness.sandboxed.regions.capture import capture_units
from harness.sandboxed.regions.codegen import render_region
from harness.sandboxed.regions.grouping import group_regions
from harness.sandboxed.regions.runtime import attribute, bind_parameters, region_boundary
from harness.sandboxed.roles.loading import load_module
from problems import parse_problem
from problems.constants import module_constants
from tests.support.models import example, load_in_process


def _captured(name: str):
    problem = example(name)
    module = load_in_process(problem)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval()
    inputs = module.get_inputs()
    full_module = load_in_process(parse_problem(problem.source.replace("CPU_SIZES", "_IGNORED"), problem_id="x.py"))
    with torch.device("meta"):
        full = full_module.get_inputs()
    tree = ast.parse(problem.source)
    constants = {k: (v, module_constants(tree, problem.cpu_sizes)[k]) for k, v in module_constants(tree).items()
                 if isinstance(v, int)}
    units, failures, _ = capture_units(model, inputs, full=full, cpu=[x.to("meta") for x in inputs],
                                       constants=constants, model_file="problem:")
    assert failures == [] and len(units) == 1
    return model, inputs, units[0]


def _values(graph_module: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every node's value in one run of the captured graph."""
    values: dict[str, torch.Tensor] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> object:
            result = super().run_node(node)
            values[node.name] = result
            return result

    with torch.no_grad():
        Recorder(graph_module).run(*inputs)
    return values


def test_the_two_blocks_of_the_mlp_give_one_problem_per_region_kind_with_the_model_sizes() -> None:
    _, _, unit = _captured("mlp_stack")
    groups = group_regions(unit.graph_module.graph)
    rendered = [render_region(unit.graph_module, [n.name for n in g.nodes], sizes=unit.sizes, mode="eval",
                              declarations={}, docstring="r") for g in groups]
    assert len({r.structure_key for r in rendered}) == 3  # block 0 and block 1 are the same three problems
    first = rendered[1]  # fc1 + GELU
    assert first.param_names == ("fc1_weight", "fc1_bias") and first.param_paths == ("blocks.0.fc1.weight",
                                                                                     "blocks.0.fc1.bias")
    assert first.sizes == {"batch_size": (16, 2), "seq_len": (256, 32)}
    assert first.inputs[0].shape == "(batch_size, seq_len, 256)" and first.inputs[0].cpu == (2, 32, 256)
    assert "CPU_SIZES = {'batch_size': 2, 'seq_len': 32}" in first.source
    assert "torch.ops.aten.gelu.default(linear)" in first.source
    assert {s.name for s in unit.sizes.values()} == {"batch_size", "seq_len"}
    assert all(isinstance(s, sympy.Symbol) for s in unit.sizes)


def test_a_region_problem_computes_what_the_region_computes_bound_to_the_models_weights() -> None:
    _, inputs, unit = _captured("attention_block")
    graph = unit.graph_module.graph
    for group in group_regions(graph):
        names = [n.name for n in group.nodes]
        rendered = render_region(unit.graph_module, names, sizes=unit.sizes, mode="eval", declarations={},
                                 docstring="r")
        _, region_inputs, params, outputs = region_boundary(graph, names)
        values = _values(unit.graph_module, inputs)
        problem = load_module("kl_region_test", rendered.source, "region.py")
        region_model = problem.Model()
        bind_parameters(region_model, {n: attribute(unit.graph_module, str(p.target))
                                       for n, p in zip(rendered.param_names, params, strict=True)})
        with torch.no_grad():
            got = region_model(*[values[n.name] for n in region_inputs])
        assert torch.equal(got, values[outputs[0].name]), names
        # Drawn inputs at the CPU sizes run too (the sizes are read off the inputs inside forward).
        with torch.no_grad():
            region_model(*problem.get_inputs())
