"""What a problem page can say about a problem without running it: its size constants and the
shapes of ``get_inputs()``, read from the source's syntax tree (`ast`), never executed.

Module constants (``batch_size = 128``, ``bias_shape = (out_channels, 1, 1)``) are evaluated when
they are literals or arithmetic on earlier constants; ``get_inputs()``'s returned list is read
element by element, and ``torch.randn(a, b)``-like calls become a shape with the constants
substituted. Anything else is shown as its expression.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any

__all__ = ["InputFact", "ProblemFacts", "read_facts"]

_BINOPS: dict[type[ast.operator], Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
#: torch factories whose positional arguments (or a first tuple argument) are the shape.
#: The problem format's declarations (`problems.spec`): settings, not sizes.
_DECLARATIONS = frozenset(
    {"MODE", "POLICY", "ATOL", "RTOL", "CPU_SIZES", "EXTRA_SHAPES", "INPUT_VARIANTS", "NONDETERMINISTIC", "DESCRIPTION"}
)
_SHAPE_FACTORIES = frozenset({"randn", "rand", "zeros", "ones", "empty", "full", "randint", "randperm"})
#: Exponents and sizes past these are not evaluated (a crafted source must not make us compute 10**10**10).
_MAX_POW_EXPONENT = 64
_MAX_MAGNITUDE = 1 << 62


class _Unknown(Exception):
    pass


def _eval(node: ast.expr, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_eval(e, env) for e in node.elts)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left, env), _eval(node.right, env)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right)):
            raise _Unknown
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_POW_EXPONENT:
            raise _Unknown
        try:
            value = _BINOPS[type(node.op)](left, right)
        except (ArithmeticError, ValueError):
            raise _Unknown from None
        if isinstance(value, (int, float)) and abs(value) > _MAX_MAGNITUDE:
            raise _Unknown
        return value
    raise _Unknown


@dataclass(frozen=True)
class InputFact:
    """One element of ``get_inputs()``: its shape (if known), dtype and the expression itself."""

    expression: str
    factory: str | None
    shape: tuple[Any, ...] | None
    cpu_shape: tuple[Any, ...] | None
    dtype: str


@dataclass(frozen=True)
class ProblemFacts:
    #: Module constants as evaluated (the ``cuda`` sizes).
    constants: dict[str, Any]
    #: The same constants with ``CPU_SIZES`` applied (the ``cpu`` target's sizes).
    cpu_constants: dict[str, Any]
    inputs: tuple[InputFact, ...]
    init_inputs: str | None


def _constants(tree: ast.Module) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in _DECLARATIONS:
                continue
            try:
                env[name] = _eval(node.value, env)
            except (_Unknown, RecursionError):
                continue
    return env


def _cpu_sizes(tree: ast.Module) -> dict[str, Any]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CPU_SIZES" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return {str(k): tuple(v) if isinstance(v, list) else v for k, v in value.items()} if isinstance(
                value, dict
            ) else {}
    return {}


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _returned(function: ast.FunctionDef | None) -> ast.expr | None:
    if function is None:
        return None
    returns = [n for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None]
    return returns[-1].value if returns else None


def _local_assignments(function: ast.FunctionDef | None) -> dict[str, ast.expr]:
    """``A = torch.randn(…)`` inside ``get_inputs``: the last expression bound to each name."""
    found: dict[str, ast.expr] = {}
    for node in function.body if function is not None else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
    return found


def _shape(call: ast.Call, env: dict[str, Any]) -> tuple[Any, ...] | None:
    factory = call.func.attr if isinstance(call.func, ast.Attribute) else None
    args = list(call.args)
    if factory == "randint":
        args = args[2:] if len(args) >= 3 else [kw.value for kw in call.keywords if kw.arg == "size"]
    elif factory == "full" or factory == "randperm":
        args = args[:1]
    try:
        values = [_eval(a, env) for a in args]
    except (_Unknown, RecursionError):
        return None
    if len(values) == 1 and isinstance(values[0], tuple):
        values = list(values[0])
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return tuple(values)


def _dtype(call: ast.Call) -> str:
    for kw in call.keywords:
        if kw.arg == "dtype":
            return ast.unparse(kw.value).removeprefix("torch.")
    factory = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    return "int64" if factory in ("randint", "randperm") else "float32"


def read_facts(source: str) -> ProblemFacts:
    """The facts of a problem source; empty facts if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ProblemFacts(constants={}, cpu_constants={}, inputs=(), init_inputs=None)
    constants = _constants(tree)
    cpu_constants = {**constants, **_cpu_sizes(tree)}
    get_inputs = _function(tree, "get_inputs")
    returned = _returned(get_inputs)
    elements = list(returned.elts) if isinstance(returned, (ast.List, ast.Tuple)) else ([returned] if returned else [])
    local = _local_assignments(get_inputs)
    inputs = []
    for element in elements:
        if isinstance(element, ast.Name) and element.id in local:
            element = local[element.id]
        is_factory = (
            isinstance(element, ast.Call)
            and isinstance(element.func, ast.Attribute)
            and element.func.attr in _SHAPE_FACTORIES
        )
        if is_factory:
            assert isinstance(element, ast.Call) and isinstance(element.func, ast.Attribute)
            inputs.append(
                InputFact(
                    expression=ast.unparse(element),
                    factory=element.func.attr,
                    shape=_shape(element, constants),
                    cpu_shape=_shape(element, cpu_constants),
                    dtype=_dtype(element),
                )
            )
        else:
            inputs.append(InputFact(ast.unparse(element), None, None, None, ""))
    init = _returned(_function(tree, "get_init_inputs"))
    return ProblemFacts(
        constants=constants,
        cpu_constants=cpu_constants,
        inputs=tuple(inputs),
        init_inputs=ast.unparse(init) if init is not None else None,
    )
