"""A region of a captured graph as a KernelBench-format problem's source.

The problem's ``forward`` is the region's own ATen calls, in order (``torch.ops.aten.linear.default``
…: the operations the model runs, so the problem computes what the region computes, bit for bit);
its parameters are module parameters and buffers with the model's shapes and dtypes, drawn with
the model's statistics (the referee re-draws them, keeping those); its inputs are drawn with the
shapes recorded at the region's boundary. Sizes that follow the model's size constants (a batch,
a sequence length) are module constants of the same names, with the model's ``CPU_SIZES``; inside
``forward`` they are read off the inputs, so the problem runs at any of its sizes.

Local names are canonical (``x``, ``linear``, ``linear_1``…) and statistics are left out of the
structure key: two instances of one block with the same shapes give one problem, and one kernel
replaces both. Sandbox side (torch).
"""

from __future__ import annotations

import hashlib
import keyword
import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx as fx
from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

from harness.sandboxed.regions.grouping import functional_twin
from harness.sandboxed.regions.runtime import attribute, is_shape_node, region_boundary

__all__ = ["RenderedRegion", "SizeName", "TensorStats", "render_region", "tensor_stats"]


@dataclass(frozen=True)
class SizeName:
    """A dynamic size of the capture: the model constant it follows (or ``dim<k>``), and its
    values at the full sizes and at the CPU sizes."""

    name: str
    full: int
    cpu: int


@dataclass(frozen=True)
class TensorStats:
    """What a drawn tensor imitates: a float's mean, std and whether it is never negative; an
    integer's range; a bool's."""

    dtype: str
    mean: float = 0.0
    std: float = 1.0
    nonneg: bool = False
    low: int = 0
    high: int = 1


def tensor_stats(tensor: torch.Tensor) -> TensorStats:
    dtype = str(tensor.dtype).removeprefix("torch.")
    if tensor.dtype is torch.bool:
        return TensorStats(dtype)
    if not tensor.is_floating_point():
        if tensor.numel() == 0:
            return TensorStats(dtype)
        return TensorStats(dtype, low=int(tensor.min()), high=int(tensor.max()))
    if tensor.numel() == 0:
        return TensorStats(dtype)
    values = tensor.detach().double()
    std = float(values.std()) if values.numel() > 1 else 0.0
    mean = float(values.mean())
    return TensorStats(dtype, mean=mean if math.isfinite(mean) else 0.0, std=std if math.isfinite(std) else 1.0,
                       nonneg=bool((values >= 0).all()))


@dataclass(frozen=True)
class BoundaryTensor:
    """A tensor at a region's boundary: its shape as rendered (constants' names), at the full
    sizes and at the CPU sizes, and its dtype."""

    shape: str
    full: tuple[int, ...]
    cpu: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class RenderedRegion:
    source: str
    #: Equal for two regions that are the same problem (statistics and docstring left out).
    structure_key: str
    #: The problem's parameter names, in the order `region_boundary` lists the region's.
    param_names: tuple[str, ...]
    #: What each reads in the model (relative to the unit).
    param_paths: tuple[str, ...]
    inputs: tuple[BoundaryTensor, ...]
    outputs: tuple[BoundaryTensor, ...]
    params: tuple[BoundaryTensor, ...]
    random: bool
    #: Size constants the problem declares: name → (full, cpu).
    sizes: Mapping[str, tuple[int, int]]


_HELPERS = '''

def _floats(shape, dtype, mean, std, nonneg):
    """Values with the model's statistics (the referee re-draws weights from its secret seed, keeping them)."""
    if std == 0:
        return torch.full(shape, mean, dtype=dtype)
    values = torch.randn(shape, dtype=torch.float32) * std + mean
    return (values.abs() if nonneg else values).to(dtype)


def _integers(shape, dtype, low, high):
    return torch.randint(low, high + 1, shape, dtype=dtype)
'''


def _identifier(text: str, taken: set[str]) -> str:
    name = re.sub(r"\W", "_", text).strip("_") or "t"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = f"p_{name}"
    base, k = name, 1
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


def _param_name(path: str, taken: set[str]) -> str:
    """``fc1_weight`` for ``blocks.0.fc1.weight``; ``stem_0_weight`` for ``stem.0.weight``."""
    parts = [p for p in path.split(".") if p]
    keep = 3 if len(parts) > 2 and parts[-2].isdigit() else 2
    return _identifier("_".join(parts[-keep:]), taken)


class _Printer:
    """Sizes as Python: a symbol by its constant's name, sums, products, floor division, powers."""

    def __init__(self, names: Mapping[sympy.Symbol, str]) -> None:
        self.names = names

    def __call__(self, expr: Any) -> str | None:
        if isinstance(expr, (int, float)):
            return repr(expr)
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return str(int(expr))
        if expr.is_Number:
            return repr(float(expr))
        if expr.is_Symbol:
            return self.names.get(expr)
        if isinstance(expr, sympy.Add):
            parts = [self(a) for a in expr.args]
            return None if None in parts else "(" + " + ".join(p for p in parts if p) + ")"
        if isinstance(expr, sympy.Mul):
            parts = [self(a) for a in expr.args]
            return None if None in parts else "*".join(f"({p})" if " " in p else p for p in parts if p)
        if isinstance(expr, sympy.Pow):
            base, exponent = self(expr.base), self(expr.exp)
            return None if base is None or exponent is None else f"({base})**({exponent})"
        if isinstance(expr, FloorDiv):
            a, b = self(expr.args[0]), self(expr.args[1])
            return None if a is None or b is None else f"(({a}) // ({b}))"
        if isinstance(expr, (Mod, PythonMod)):
            a, b = self(expr.args[0]), self(expr.args[1])
            return None if a is None or b is None else f"(({a}) % ({b}))"
        return None


def _expr(value: Any) -> Any:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return value.node.expr
    return value


def _evaluate(expr: Any, values: Mapping[sympy.Symbol, int]) -> int:
    expr = sympy.sympify(expr)
    return int(expr.xreplace({s: sympy.Integer(v) for s, v in values.items()}))


def _literal(value: Any, device_of: str) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, torch.device):
        return device_of
    if isinstance(value, torch.layout):
        return str(value)
    if isinstance(value, torch.memory_format):
        return str(value)
    raise TypeError(f"cannot write a {type(value).__name__} argument into a problem")


def render_region(graph_module: fx.GraphModule, names: Sequence[str], *, sizes: Mapping[sympy.Symbol, SizeName],
                  mode: str, declarations: Mapping[str, Any], docstring: str,
                  input_stats: Sequence[TensorStats] | None = None,
                  param_stats: Sequence[TensorStats] | None = None) -> RenderedRegion:
    """The problem source of one region (see the module's docstring).

    Args:
        graph_module: the captured unit (its nodes' ``val`` metadata hold the shapes).
        names: the region's compute nodes.
        sizes: the capture's dynamic sizes by symbol.
        mode: the model's ``MODE``.
        declarations: literal declarations copied from the model (``ATOL``, ``RTOL``).
        docstring: the problem's first lines.
        input_stats, param_stats: what the drawn inputs and initial parameters imitate (default: N(0, 1)).

    Raises:
        TypeError: an argument cannot be written as Python (the region is not extractable).
    """
    graph = graph_module.graph
    members, inputs, params, outputs = region_boundary(graph, names)
    used = [s for s in sizes if any(s in _free(n) for n in (*inputs, *members))]
    printer = _Printer({s: sizes[s].name for s in sizes})
    full = {s: sizes[s].full for s in sizes}
    cpu = {s: sizes[s].cpu for s in sizes}

    taken = {"self", "torch", "nn"} | {sizes[s].name for s in used}
    local: dict[fx.Node, str] = {}
    input_names = [_identifier("x" if len(inputs) == 1 else f"x{k}", taken) for k in range(len(inputs))]
    local.update(zip(inputs, input_names, strict=True))
    param_names = [_param_name(str(p.target), set(taken) | {n for n in local.values()}) for p in params]
    for name in param_names:
        taken.add(name)
    param_refs = {p: f"self.{name}" for p, name in zip(params, param_names, strict=True)}
    device_of = f"{input_names[0]}.device" if input_names else "torch.device('cpu')"

    # Sizes read off the inputs inside forward (the others are the module constants).
    derivable: dict[sympy.Symbol, str] = {}
    for node, name in zip(inputs, input_names, strict=True):
        value = node.meta.get("val")
        for d, dim in enumerate(getattr(value, "shape", ())):
            expr = _expr(dim)
            if isinstance(expr, sympy.Symbol) and expr in sizes and expr not in derivable:
                derivable[expr] = f"{name}.shape[{d}]"

    def arg(value: Any) -> str:
        if isinstance(value, fx.Node):
            if value in local:
                return local[value]
            if value in param_refs:
                return param_refs[value]
            if is_shape_node(value):
                text = printer(_expr(value.meta.get("val")))
                if text is None:
                    raise TypeError(f"the size {value.meta.get('val')} cannot be written from the region's inputs")
                return text
            raise TypeError(f"the region reads {value.name}, which is neither its input nor its parameter")
        if isinstance(value, (list, tuple)):
            inner = ", ".join(arg(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            text = printer(_expr(value))
            if text is None:
                raise TypeError(f"the size {value} cannot be written")
            return text
        return _literal(value, device_of)

    body: list[str] = []
    for symbol, reading in derivable.items():
        if any(symbol in _free(n) for n in members):
            body.append(f"        {sizes[symbol].name} = {reading}")
    random = False
    for node in members:
        name = _identifier(_op_name(node), taken)
        local[node] = name
        if node.target is operator.getitem:
            body.append(f"        {name} = {arg(node.args[0])}[{arg(node.args[1])}]")
            continue
        target = functional_twin(node) or node.target  # relu_ of an intermediate: its value, out of place
        if not isinstance(target, torch._ops.OpOverload):
            raise TypeError(f"node {node.name} calls {target!r}, not an ATen operation")
        random = random or (torch.Tag.nondeterministic_seeded in target.tags and _is_random(node))
        call_args = [arg(a) for a in node.args] + [f"{k}={arg(v)}" for k, v in node.kwargs.items()]
        op = f"torch.ops.{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
        body.append(f"        {name} = {op}({', '.join(call_args)})")
    returned = [local[o] for o in outputs]
    body.append(f"        return {returned[0] if len(returned) == 1 else '(' + ', '.join(returned) + ')'}")

    def boundary(node: fx.Node) -> BoundaryTensor:
        value = node.meta["val"]
        dims = [_expr(d) for d in value.shape]
        texts = [printer(d) for d in dims]
        if None in texts:
            texts = [str(_evaluate(d, full)) for d in dims]
        shape = "(" + ", ".join(t for t in texts if t is not None) + ("," if len(dims) == 1 else "") + ")"
        return BoundaryTensor(shape=shape, full=tuple(_evaluate(d, full) for d in dims),
                              cpu=tuple(_evaluate(d, cpu) for d in dims), dtype=str(value.dtype).removeprefix("torch."))

    in_bounds = [boundary(n) for n in inputs]
    out_bounds = [boundary(n) for n in outputs]
    param_values = [attribute(graph_module, str(p.target)) for p in params]
    param_bounds = [BoundaryTensor(shape=str(tuple(t.shape)), full=tuple(t.shape), cpu=tuple(t.shape),
                                   dtype=str(t.dtype).removeprefix("torch.")) for t in param_values]
    is_param = [isinstance(t, torch.nn.Parameter) for t in param_values]
    declared_sizes = {sizes[s].name: (sizes[s].full, sizes[s].cpu) for s in used}

    def render(stats: bool) -> str:
        lines = ["import torch", "import torch.nn as nn", "", f"MODE = {mode!r}"]
        lines += [f"{k} = {v!r}" for k, v in declarations.items()]
        if random:
            lines.append("RANDOM = True")
        lines += [f"{name} = {values[0]}" for name, values in declared_sizes.items()]
        cpu_sizes = {name: values[1] for name, values in declared_sizes.items() if values[1] != values[0]}
        if cpu_sizes:
            lines.append(f"CPU_SIZES = {cpu_sizes!r}")
        lines.append(_HELPERS)
        lines += ["", "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()"]
        for k, (name, bound) in enumerate(zip(param_names, param_bounds, strict=True)):
            value = _draw(bound.shape, bound.dtype, (param_stats or [])[k] if stats and param_stats else None)
            if is_param[k] and bound.dtype not in _INTEGER_DTYPES:
                lines.append(f"        self.{name} = nn.Parameter({value})")
            else:
                lines.append(f"        self.register_buffer({name!r}, {value})")
        if not param_names:
            lines.append("        pass")
        lines += ["", f"    def forward(self, {', '.join(input_names)}):", *body, "", "", "def get_inputs():"]
        drawn = [_draw(b.shape, b.dtype, (input_stats or [])[k] if stats and input_stats else None)
                 for k, b in enumerate(in_bounds)]
        lines += [f"    return [{', '.join(drawn)}]", "", "", "def get_init_inputs():", "    return []", ""]
        return "\n".join(lines)

    structure = render(stats=False)
    source = f'"""{docstring}"""\n\n' + render(stats=True)
    return RenderedRegion(
        source=source, structure_key=hashlib.sha256(structure.encode()).hexdigest()[:16],
        param_names=tuple(param_names), param_paths=tuple(str(p.target) for p in params), inputs=tuple(in_bounds),
        outputs=tuple(out_bounds), params=tuple(param_bounds), random=random, sizes=declared_sizes)


_INTEGER_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "bool"})


def _draw(shape: str, dtype: str, stats: TensorStats | None) -> str:
    if dtype == "bool":
        return f"torch.rand({shape}) > 0.5"
    if dtype in _INTEGER_DTYPES:
        low, high = (stats.low, stats.high) if stats else (0, 1)
        return f"_integers({shape}, torch.{dtype}, {low}, {high})"
    if stats is None:
        return f"_floats({shape}, torch.{dtype}, 0.0, 1.0, False)"
    return f"_floats({shape}, torch.{dtype}, {stats.mean:.6g}, {stats.std:.6g}, {stats.nonneg})"


def _op_name(node: fx.Node) -> str:
    if node.target is operator.getitem:
        return "getitem"
    target = functional_twin(node) or node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name.split("::")[-1].lstrip("_")
    return "value"


def _is_random(node: fx.Node) -> bool:
    """A seeded-random op that draws here (dropout with ``train=False`` draws nothing)."""
    name = _op_name(node)
    if "dropout" in name:
        train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train", True)
        return bool(train)
    return True


def _free(node: fx.Node) -> set[sympy.Symbol]:
    """The size symbols a node's value or arguments mention."""
    found: set[sympy.Symbol] = set()

    def visit(value: Any) -> Any:
        if isinstance(value, fx.Node):
            inner = value.meta.get("val")
            if isinstance(inner, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                found.update(sympy.sympify(inner.node.expr).free_symbols)
        elif isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            found.update(sympy.sympify(value.node.expr).free_symbols)
        return value

    value = node.meta.get("val")
    for dim in getattr(value, "shape", ()):
        expr = _expr(dim)
        if not isinstance(expr, int):
            found.update(sympy.sympify(expr).free_symbols)
    fx.node.map_arg((node.args, node.kwargs), visit)
    for a in (*node.args, *node.kwargs.values()):
        if isinstance(a, (list, tuple)):
            for v in a:
                visit(v)
        else:
            visit(a)
    return found
