"""Regions of a captured forward, and the patch that puts kernels in their place.

This file is self-contained (torch and the standard library only): `kernelloop model apply` copies
it, unchanged, into the ``patched.py`` it writes, so a patched model runs where kernelloop is not
installed. The model sandbox imports it too, so the regions a profile names and the regions a
patch replaces are found by one piece of code.

A model (or a submodule: a *unit*) is captured with ``torch.export`` (non-strict) at the inputs of
a call; ``ExportedProgram.module()`` keeps the model's own parameter objects, so whatever replaces
a region is bound to the model's weights, not to copies. A region is a set of compute nodes of that
graph named by their node names; its *boundary* (`region_boundary`) adds the views that feed it
(views are free: a region recomputes the ones it needs) and orders its tensor inputs, parameters
and outputs: the order the extracted problem's ``forward`` and ``__init__`` use.

`install` sets an instance ``forward`` on each unit that captures the unit's class forward on its
first call with a new input signature (shapes, dtypes, devices, train or eval), replaces each
region by a call to its kernel (`contract_graph`) and runs that graph from then on.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx

__all__ = ["PatchError", "attribute", "bind_parameters", "capture", "contract_graph", "install", "is_mutation_node",
           "is_shape_node", "is_view_node", "node_targets", "region_boundary", "target_name"]


class PatchError(RuntimeError):
    """A region cannot be put in place: the graph differs from the profiled one, or a kernel's
    parameters do not match its region's."""


def target_name(node: fx.Node) -> str:
    """``aten.linear.default``, ``operator.getitem``: what a call_function node calls."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__name__', str(target))}".lstrip(".")


def _value(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def is_shape_node(node: fx.Node) -> bool:
    """A node computing a size (``sym_size``, arithmetic on sizes), not a tensor."""
    value = _value(node)
    return node.op == "call_function" and isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float,
                                                             bool))


def _aliases_input(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    infos = [r.alias_info for r in schema.returns]
    return all(info is not None and not info.is_write for info in infos)


def is_view_node(node: fx.Node) -> bool:
    """A node whose result is a view of its input (``view``, ``transpose``, ``split`` and the
    ``getitem`` of a split): free, so every region that needs it recomputes it."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        source = node.args[0]
        return isinstance(source, fx.Node) and is_view_node(source)
    return _aliases_input(node.target) and not is_shape_node(node)


def is_mutation_node(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable and not schema.name.endswith("batch_norm")


def _tensor_args(node: fx.Node) -> list[fx.Node]:
    found: list[fx.Node] = []

    def visit(value: Any) -> Any:
        if isinstance(value, fx.Node) and value not in found:
            found.append(value)
        return value

    fx.node.map_arg((node.args, node.kwargs), visit)
    return [n for n in found if not is_shape_node(n)]


def node_targets(graph: fx.Graph) -> dict[str, str]:
    """Every call_function node's name and what it calls."""
    return {n.name: target_name(n) for n in graph.nodes if n.op == "call_function"}


def region_boundary(graph: fx.Graph, names: Sequence[str]) -> tuple[list[fx.Node], list[fx.Node], list[fx.Node],
                                                                  list[fx.Node]]:
    """A region's members, tensor inputs, parameters and outputs, each in graph order.

    Members are the named compute nodes, the ``getitem``\\ s of their multi-output calls, and the
    chains of views that feed them (a prologue, recomputed inside). Inputs are the tensors the
    members read from outside (parameters and buffers, ``get_attr`` nodes, apart); outputs are the
    compute members read outside the region or returned.

    Raises:
        PatchError: a named node is not in the graph.
    """
    by_name = {n.name: n for n in graph.nodes}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise PatchError(f"nodes {missing[:5]} are not in the captured graph")
    compute = {by_name[name] for name in names}
    for node in list(compute):
        compute.update(u for u in node.users if u.op == "call_function" and u.target is operator.getitem)
    members = set(compute)
    pending = [a for n in compute for a in _tensor_args(n)]
    while pending:
        arg = pending.pop()
        if arg in members or not is_view_node(arg):
            continue
        members.add(arg)
        pending.extend(_tensor_args(arg))
    order = {n: i for i, n in enumerate(graph.nodes)}
    ordered = sorted(members, key=order.__getitem__)
    inputs: list[fx.Node] = []
    params: list[fx.Node] = []
    for node in ordered:
        for arg in _tensor_args(node):
            if arg in members:
                continue
            bucket = params if arg.op == "get_attr" else inputs
            if arg not in bucket:
                bucket.append(arg)
    outputs = [n for n in ordered if n in compute and isinstance(_value(n), torch.Tensor)
               and any(u not in members or u.op == "output" for u in n.users)]
    return ordered, inputs, params, outputs


def capture(module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, *,
            dynamic_shapes: Any = None) -> fx.GraphModule:
    """The module's class ``forward`` at these inputs, as a graph over its own parameters
    (an instance ``forward`` set by `install` is set aside meanwhile)."""
    patched = module.__dict__.pop("forward", None)
    try:
        program = torch.export.export(module, tuple(args), dict(kwargs or {}), dynamic_shapes=dynamic_shapes,
                                      strict=False)
    finally:
        if patched is not None:
            module.__dict__["forward"] = patched
    return program.module()


def contract_graph(graph_module: fx.GraphModule, regions: Sequence[Sequence[str]],
                   calls: Sequence[Callable[..., Any]]) -> fx.GraphModule:
    """A copy of the graph in which each region (its node names) is one call of its callable,
    which takes the region's tensor inputs (`region_boundary` order) and returns its output, or a
    tuple of its outputs. The result is re-ordered topologically (a region runs once all of its
    inputs exist); the model's parameters are shared, not copied.

    Raises:
        PatchError: a region's node is missing, or regions overlap or depend on each other both ways.
    """
    graph = graph_module.graph
    owner: dict[fx.Node, int] = {}
    bounds = []
    for index, names in enumerate(regions):
        members, inputs, _, outputs = region_boundary(graph, names)
        for node in members:
            if node in owner and not is_view_node(node):
                raise PatchError(f"node {node.name} is in two regions")
            if not is_view_node(node):
                owner[node] = index
        bounds.append((inputs, outputs))
    units: list[Any] = []  # a node outside every region, or a region's index
    seen: set[int] = set()
    for node in graph.nodes:
        if node in owner:
            if owner[node] not in seen:
                seen.add(owner[node])
                units.append(owner[node])
        else:
            units.append(node)
    position = {unit: i for i, unit in enumerate(units)}

    def unit_of(node: fx.Node) -> Any:
        return owner.get(node, node)

    def needs(unit: Any) -> set[Any]:
        if isinstance(unit, int):
            return {unit_of(n) for n in bounds[unit][0]}
        deps = {unit_of(a) for a in unit.all_input_nodes}
        deps.discard(unit)
        return deps

    deps = {unit: needs(unit) for unit in units}
    done: set[Any] = set()
    ordered: list[Any] = []
    ready = sorted((u for u in units if not deps[u]), key=position.__getitem__)
    waiting = {u: set(d) for u, d in deps.items() if d}
    users: dict[Any, list[Any]] = {}
    for unit, needed in deps.items():
        for d in needed:
            users.setdefault(d, []).append(unit)
    while ready:
        unit = ready.pop(0)
        ordered.append(unit)
        done.add(unit)
        for user in users.get(unit, ()):
            pending = waiting.get(user)
            if pending is None:
                continue
            pending.discard(unit)
            if not pending:
                del waiting[user]
                ready.append(user)
                ready.sort(key=position.__getitem__)
    if waiting:
        raise PatchError("the regions depend on each other in a cycle")
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for unit in ordered:
        if not isinstance(unit, int):
            env[unit] = new.node_copy(unit, lambda n: env[n])
            continue
        inputs, outputs = bounds[unit]
        call = new.call_function(calls[unit], tuple(env[n] for n in inputs))
        if len(outputs) == 1:
            env[outputs[0]] = call
        else:
            for k, out in enumerate(outputs):
                env[out] = new.call_function(operator.getitem, (call, k))
    new._codegen = graph._codegen
    result = fx.GraphModule(graph_module, new)
    result.graph.eliminate_dead_code()
    result.recompile()
    return result


def _state_tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Floating parameters and buffers, in registration order (the referee's order)."""
    named = [*module.named_parameters(), *module.named_buffers()]
    seen: set[int] = set()
    ordered = []
    for name, tensor in module.state_dict(keep_vars=True).items():
        match = next((t for n, t in named if n == name), tensor)
        if id(match) in seen:
            continue
        seen.add(id(match))
        ordered.append((name, match))
    return ordered


def _assign(module: torch.nn.Module, name: str, tensor: torch.Tensor) -> None:
    owner_path, _, attr = name.rpartition(".")
    owner = module.get_submodule(owner_path) if owner_path else module
    if attr in owner._parameters:
        owner._parameters[attr] = tensor if isinstance(tensor, torch.nn.Parameter) else torch.nn.Parameter(
            tensor, requires_grad=False)
    else:
        owner._buffers[attr] = tensor


def bind_parameters(kernel: torch.nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Make ``kernel`` use the model's own tensors: by name where it has the region problem's
    names, else by registration order where its floating parameters and buffers match the
    region's one to one in shape (what the referee accepts of a candidate).

    Raises:
        PatchError: neither matches; the message lists both.
    """
    own = dict(_state_tensors(kernel))
    if all(n in own and tuple(own[n].shape) == tuple(t.shape) for n, t in tensors.items()):
        for name, tensor in tensors.items():
            _assign(kernel, name, tensor)
        return
    floating = [(n, t) for n, t in _state_tensors(kernel) if t.is_floating_point()]
    wanted = [(n, t) for n, t in tensors.items() if t.is_floating_point()]
    if len(floating) == len(wanted) and all(tuple(a.shape) == tuple(b.shape)
                                            for (_, a), (_, b) in zip(floating, wanted, strict=True)):
        for (name, _), (_, tensor) in zip(floating, wanted, strict=True):
            _assign(kernel, name, tensor)
        return
    theirs = [f"{n}{tuple(t.shape)}" for n, t in _state_tensors(kernel)]
    ours = [f"{n}{tuple(t.shape)}" for n, t in tensors.items()]
    raise PatchError(f"the kernel's parameters {theirs} match the region's {ours} neither by name nor in order")


def attribute(module: torch.nn.Module, path: str) -> Any:
    """What a ``get_attr`` node reads: a parameter, buffer or constant, by its dotted path (the
    captured graph holds the model's own objects)."""
    value: Any = module
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _signature(module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    leaves = torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs)))
    return (module.training, *((tuple(x.shape), x.dtype, x.device) if isinstance(x, torch.Tensor) else repr(x)
                               for x in leaves))


class _PatchedForward:
    """A unit's instance ``forward``: captures, contracts and caches per input signature."""

    def __init__(self, module: torch.nn.Module, regions: Sequence[Mapping[str, Any]],
                 kernels: Mapping[str, Callable[[], torch.nn.Module]]) -> None:
        self.module = module
        self.regions = list(regions)
        self.kernels = kernels
        self.graphs: dict[tuple[Any, ...], fx.GraphModule] = {}

    def _kernel_call(self, region: Mapping[str, Any], captured: fx.GraphModule,
                     device: torch.device) -> Callable[..., Any]:
        _, _, params, _ = region_boundary(captured.graph, region["nodes"])
        names = list(region["params"])
        if len(names) != len(params):
            raise PatchError(f"region {region['name']}: {len(params)} parameters here, {len(names)} when profiled")
        tensors = {name: attribute(captured, str(p.target)) for name, p in zip(names, params, strict=True)}
        kernel = self.kernels[region["kind"]]().to(device)
        bind_parameters(kernel, tensors)
        kernel.train(self.module.training)

        def call(*inputs: Any) -> Any:
            return kernel(*inputs)

        call.__name__ = f"region_{region['name']}"
        call.kernel = kernel  # type: ignore[attr-defined]
        return call

    def build(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> fx.GraphModule:
        captured = capture(self.module, args, kwargs)
        found = node_targets(captured.graph)
        for region in self.regions:
            for name, target in zip(region["nodes"], region["targets"], strict=True):
                if found.get(name) != target:
                    raise PatchError(
                        f"region {region['name']}: the graph captured here differs from the profiled one (node "
                        f"{name} is {found.get(name, 'absent')} here, {target} when profiled)")
        tensor = next((x for x in torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs)))
                       if isinstance(x, torch.Tensor)), None)
        device = tensor.device if tensor is not None else torch.device("cpu")
        calls = [self._kernel_call(region, captured, device) for region in self.regions]
        return contract_graph(captured, [r["nodes"] for r in self.regions], calls)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = _signature(self.module, args, kwargs)
        graph = self.graphs.get(key)
        if graph is None:
            graph = self.graphs[key] = self.build(args, kwargs)
        return graph(*args, **kwargs)


def install(model: torch.nn.Module, regions: Iterable[Mapping[str, Any]],
            kernels: Mapping[str, Callable[[], torch.nn.Module]]) -> torch.nn.Module:
    """Patch ``model`` in place: each region (``name``, ``kind``, ``unit``: the submodule's path,
    ``""`` for the model, ``nodes`` and their ``targets``, ``params``: the region problem's
    parameter names in order) is replaced by a new instance of ``kernels[kind]`` bound to the
    model's own parameters. Its state dict is unchanged. Returns the model."""
    by_unit: dict[str, list[Mapping[str, Any]]] = {}
    for region in regions:
        by_unit.setdefault(region["unit"], []).append(region)
    for unit, unit_regions in by_unit.items():
        module = model.get_submodule(unit) if unit else model
        module.__dict__["forward"] = _PatchedForward(module, unit_regions, kernels)
    return model
