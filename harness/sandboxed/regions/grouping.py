"""Regions of a captured graph, grouped as a fusing compiler would group them.

Each compute node of a ``torch.export`` graph gets a `NodeKind`: heavy (matmul, convolution,
attention: a vendor library's work), normalisation, reduction, pointwise (ATen's ``pointwise``
tag, and eval-mode batch norm, a per-channel affine map), view (free: the regions that need one
recompute it, `harness.sandboxed.regions.runtime.region_boundary`), size arithmetic, mutation (running
statistics' counters) or other. Walking the graph in order:

- a heavy op starts a region; the pointwise ops after it join it (its epilogue), and so does a
  softmax after a matmul, with the matmul after that softmax: an attention core;
- a normalisation starts a region, or joins a region of pointwise ops before it (a residual add
  and the layer norm after it);
- a reduction or other op starts a region; pointwise ops with no region before them start a
  pointwise chain.

A node joins the most recent region it reads from unless that would make the regions depend on
each other both ways. A region holding one heavy op and nothing else is a *lone vendor call*: there
is nothing around it to fuse, so a kernel must beat the vendor library at its own op.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from enum import StrEnum

import torch
import torch.fx as fx

from harness.sandboxed.regions.runtime import is_mutation_node, is_shape_node, is_view_node

__all__ = ["Group", "NodeKind", "RegionKind", "classify", "functional_twin", "group_regions", "short_op"]


class NodeKind(StrEnum):
    HEAVY = "heavy"
    NORM = "norm"
    REDUCTION = "reduction"
    POINTWISE = "pointwise"
    VIEW = "view"
    SHAPE = "shape"
    MUTATION = "mutation"
    OTHER = "other"
    #: Not part of any region (a getitem of a multi-output op goes with that op; assertions).
    NONE = "none"


class RegionKind(StrEnum):
    #: A heavy op with its epilogue (pointwise ops after it).
    HEAVY = "heavy"
    #: matmul → (pointwise) → softmax → matmul, or scaled_dot_product_attention.
    ATTENTION = "attention"
    NORM = "norm"
    REDUCTION = "reduction"
    POINTWISE = "pointwise"
    OTHER = "other"


_HEAVY = frozenset({
    "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "einsum", "conv1d", "conv2d",
    "conv3d", "convolution", "_convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
})
_MATMULS = frozenset({"matmul", "bmm", "mm", "baddbmm", "einsum"})
_ATTENTION_OPS = frozenset(n for n in _HEAVY if "attention" in n)
_NORMS = frozenset({"layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm",
                    "rms_norm", "_fused_rms_norm"})
_BATCH_NORMS = frozenset({"batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                          "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional"})
_REDUCTIONS = frozenset({
    "softmax", "_softmax", "log_softmax", "_log_softmax", "_safe_softmax", "sum", "mean", "amax", "amin", "max",
    "min", "var", "std", "var_mean", "std_mean", "logsumexp", "norm", "linalg_vector_norm", "cumsum", "cumprod",
    "argmax", "argmin", "prod", "max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "_adaptive_avg_pool2d", "adaptive_max_pool2d", "topk", "sort",
})
_SOFTMAXES = frozenset({"softmax", "_softmax", "_safe_softmax"})
#: Pointwise in effect though not tagged so (copies, casts, activations defined by composition).
_POINTWISE = frozenset({
    "gelu", "silu", "relu", "relu6", "hardtanh", "hardswish", "hardsigmoid", "leaky_relu", "elu", "selu",
    "celu", "softplus", "mish", "dropout", "native_dropout", "feature_dropout", "alpha_dropout", "clone",
    "_to_copy", "to", "type_as", "where", "masked_fill", "clamp", "clamp_min", "clamp_max", "copy", "fill",
    "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "lerp", "addcmul", "addcdiv",
    "cat", "stack", "pad", "constant_pad_nd", "tril", "triu", "rsub", "logical_not",
})


def short_op(node: fx.Node) -> str:
    """``linear`` for ``aten.linear.default`` (``relu`` for an in-place ``relu_`` of an intermediate)."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        name = target._schema.name.split("::")[-1]
        return name[:-1] if name.endswith("_") and functional_twin(node) is not None else name
    return getattr(target, "__name__", str(target))


def functional_twin(node: fx.Node) -> torch._ops.OpOverload | None:
    """The out-of-place op of an in-place op on an intermediate value (``relu_`` of a conv's output,
    as ``nn.ReLU(inplace=True)`` writes it): what a region computes instead. None for an in-place
    op on the model's state (a running statistic's counter) or one without a twin."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or not is_mutation_node(node):
        return None
    mutated = node.args[0] if node.args else None
    if not isinstance(mutated, fx.Node) or mutated.op != "call_function":
        return None
    name = target._schema.name.split("::")[-1]
    if not name.endswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    twin = getattr(packet, target._overloadname, None) if packet is not None else None
    return twin if isinstance(twin, torch._ops.OpOverload) else None


def classify(node: fx.Node) -> NodeKind:
    if node.op != "call_function":
        return NodeKind.NONE
    if is_shape_node(node):
        return NodeKind.SHAPE
    if is_view_node(node):
        return NodeKind.VIEW
    if node.target is operator.getitem or not isinstance(node.target, torch._ops.OpOverload):
        return NodeKind.NONE
    value = node.meta.get("val")
    if not isinstance(value, (torch.Tensor, tuple, list)):
        return NodeKind.NONE  # _assert_tensor_metadata and the like
    name = short_op(node)
    tags = node.target.tags
    if is_mutation_node(node):
        twin = functional_twin(node)
        if twin is None:
            return NodeKind.MUTATION
        name, tags = twin._schema.name.split("::")[-1], twin.tags
    if name in _HEAVY:
        return NodeKind.HEAVY
    if name in _BATCH_NORMS:
        training = _batch_norm_training(node)
        return NodeKind.NORM if training else NodeKind.POINTWISE
    if name in _NORMS:
        return NodeKind.NORM
    if name in _REDUCTIONS:
        return NodeKind.REDUCTION
    if name in _POINTWISE or torch.Tag.pointwise in tags:
        return NodeKind.POINTWISE
    return NodeKind.OTHER


def _batch_norm_training(node: fx.Node) -> bool:
    """Whether a batch norm node uses batch statistics (its ``training`` argument)."""
    name = short_op(node)
    if name == "_native_batch_norm_legit_no_training":
        return False
    schema = node.target._schema  # type: ignore[union-attr]
    for index, argument in enumerate(schema.arguments):
        if argument.name == "training":
            value = node.args[index] if index < len(node.args) else node.kwargs.get("training", True)
            return bool(value)
    return True


@dataclass
class Group:
    """One region while it is being grouped: its compute nodes in graph order."""

    kind: RegionKind
    nodes: list[fx.Node] = field(default_factory=list)
    mask: int = 0

    @property
    def heavy_ops(self) -> list[str]:
        return [short_op(n) for n in self.nodes if classify(n) is NodeKind.HEAVY]

    @property
    def lone_vendor_call(self) -> bool:
        return len(self.nodes) == 1 and classify(self.nodes[0]) is NodeKind.HEAVY

    @property
    def has_softmax(self) -> bool:
        return any(short_op(n) in _SOFTMAXES for n in self.nodes)


def _producer(node: fx.Node) -> fx.Node:
    """The compute node behind a value: through views and the getitems of multi-output ops."""
    while node.op == "call_function" and (is_view_node(node) or node.target is operator.getitem):
        source = node.args[0]
        if not isinstance(source, fx.Node):
            break
        node = source
    return node


def _tensor_inputs(node: fx.Node) -> list[fx.Node]:
    return [a for a in node.all_input_nodes if not is_shape_node(a)]


def group_regions(graph: fx.Graph) -> list[Group]:
    """The regions of ``graph`` (see the module's docstring), in the order they start."""
    nodes = list(graph.nodes)
    bit = {n: 1 << i for i, n in enumerate(nodes)}
    ancestors: dict[fx.Node, int] = {}
    for node in nodes:
        mask = 0
        for arg in node.all_input_nodes:
            mask |= ancestors[arg] | bit[arg]
        ancestors[node] = mask
    region_of: dict[fx.Node, Group] = {}
    groups: list[Group] = []

    def producers(node: fx.Node) -> list[Group]:
        found: list[Group] = []
        for arg in _tensor_inputs(node):
            group = region_of.get(_producer(arg))
            if group is not None and group not in found:
                found.append(group)
        return sorted(found, key=groups.index, reverse=True)

    def joinable(node: fx.Node, group: Group) -> bool:
        # Every input from outside the group must not depend on the group (no cycle).
        for arg in _tensor_inputs(node):
            base = _producer(arg)
            if region_of.get(base) is group:
                continue
            if ancestors[arg] & group.mask or ancestors[base] & group.mask or bit.get(base, 0) & group.mask:
                return False
        return True

    def join(node: fx.Node, group: Group) -> None:
        group.nodes.append(node)
        group.mask |= bit[node]
        region_of[node] = group

    def start(node: fx.Node, kind: RegionKind) -> None:
        group = Group(kind)
        groups.append(group)
        join(node, group)

    for node in nodes:
        kind = classify(node)
        if kind in (NodeKind.NONE, NodeKind.VIEW, NodeKind.SHAPE, NodeKind.MUTATION):
            continue
        before = [g for g in producers(node) if joinable(node, g)]
        name = short_op(node)
        if kind is NodeKind.POINTWISE:
            if before:
                join(node, before[0])
            else:
                start(node, RegionKind.POINTWISE)
        elif kind is NodeKind.NORM:
            target = next((g for g in before if g.kind is RegionKind.POINTWISE), None)
            if target is not None:
                target.kind = RegionKind.NORM
                join(node, target)
            else:
                start(node, RegionKind.NORM)
        elif kind is NodeKind.REDUCTION:
            attention = next((g for g in before if g.kind is RegionKind.HEAVY and len(g.heavy_ops) == 1
                              and g.heavy_ops[0] in _MATMULS and name in _SOFTMAXES), None)
            chain = next((g for g in before if g.kind is RegionKind.POINTWISE), None)
            if attention is not None:
                attention.kind = RegionKind.ATTENTION
                join(node, attention)
            elif chain is not None:
                chain.kind = RegionKind.REDUCTION
                join(node, chain)
            else:
                start(node, RegionKind.REDUCTION)
        elif kind is NodeKind.HEAVY:
            core = next((g for g in before if g.kind is RegionKind.ATTENTION and len(g.heavy_ops) == 1
                         and g.has_softmax), None)
            if core is not None and name in _MATMULS:
                join(node, core)
            else:
                start(node, RegionKind.ATTENTION if name in _ATTENTION_OPS else RegionKind.HEAVY)
        else:
            start(node, RegionKind.OTHER)
    return groups
