"""What a problem page can say about a problem without running it: its size constants and the
shapes of ``get_inputs()``, read from the source's syntax tree (`ast`), never executed.

Module constants (``batch_size = 128``, ``bias_shape = (out_channels, 1, 1)``) are evaluated when
they are literals or arithmetic on earlier constants; ``get_inputs()``'s returned list is read
element by element, and ``torch.randn(a, b)``-like calls become a shape with the constants
substituted. Anything else is shown as its expression.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from problems.constants import (
    DECLARATION_NAMES,
    Constant,
    Constants,
    NotConstant,
    as_constant,
    evaluate_constant,
    module_constants,
)

__all__ = ["InputFact", "ProblemFacts", "read_facts"]

#: torch factories whose positional arguments (or a first tuple argument) are the shape.
_SHAPE_FACTORIES = frozenset({"randn", "rand", "zeros", "ones", "empty", "full", "randint", "randperm"})

@dataclass(frozen=True)
class InputFact:
    """One element of ``get_inputs()``: its shape (if known), dtype and the expression itself."""

    expression: str
    factory: str | None
    shape: tuple[int, ...] | None
    cpu_shape: tuple[int, ...] | None
    dtype: str


@dataclass(frozen=True)
class ProblemFacts:
    #: Module constants as evaluated (the ``cuda`` sizes), lists shown as tuples.
    constants: Constants
    #: The same constants with ``CPU_SIZES`` applied, and those derived from them (the ``cpu``
    #: target's sizes).
    cpu_constants: Constants
    inputs: tuple[InputFact, ...]
    init_inputs: str | None


def _shown(value: Constant) -> Constant:
    return tuple(_shown(v) for v in value) if isinstance(value, tuple | list) else value


def _constants(tree: ast.Module, overrides: Constants | None = None) -> Constants:
    """The module's constants (`problems.constants`: nothing runs), declarations left out."""
    try:
        found = module_constants(tree, overrides)
    except RecursionError:
        return {}
    return {name: _shown(value) for name, value in found.items() if name not in DECLARATION_NAMES}


def _cpu_sizes(tree: ast.Module) -> Constants:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CPU_SIZES" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
                return {str(k): as_constant(v) for k, v in value.items()} if isinstance(value, dict) else {}
            except (ValueError, NotConstant):
                return {}
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


def _shape(call: ast.Call, env: Constants) -> tuple[int, ...] | None:
    factory = call.func.attr if isinstance(call.func, ast.Attribute) else None
    args = list(call.args)
    if factory == "randint":
        args = args[2:] if len(args) >= 3 else [kw.value for kw in call.keywords if kw.arg == "size"]
    elif factory == "full" or factory == "randperm":
        args = args[:1]
    try:
        values = [evaluate_constant(a, env) for a in args]
    except (NotConstant, RecursionError):
        return None
    if len(values) == 1 and isinstance(values[0], tuple | list):
        values = list(values[0])
    dims = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    return tuple(dims) if len(dims) == len(values) else None


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
    cpu_constants = _constants(tree, _cpu_sizes(tree))
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
