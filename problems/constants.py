"""A problem module's size constants, read statically, and overrides that flow into derived ones.

KernelBench files set sizes as module constants in several forms: ``batch_size = 16``,
``D, H, W = 24, 32, 32`` (tuple or list unpacking), and constants derived from others
(``input_shape = (batch_size, dim)``, ``out_features = in_features * 2``). This module evaluates
the module's top-level assignments in order, with a small expression evaluator (literals, names
assigned above, arithmetic, tuples, lists, indexing, ``int``/``min``/``max``/``abs``/``round``):
nothing is executed. An override (``CPU_SIZES``, an ``EXTRA_SHAPES`` entry) replaces a constant
where it is assigned, so every constant computed from it below changes too; `resolve_overrides`
returns the override plus each derived constant's new value, which the harness sets on the loaded
module. Stdlib only.

Values: a `Constant` (a number, a string, a bool, None, or a tuple or list of them: what a size
constant can be, and JSON as it stands, so a problem's sizes travel to the referee's sandbox
processes unchanged); `Constants`, module constants by name (what `module_constants` finds, an
override sets and `resolve_overrides` returns).
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

__all__ = ["DECLARATION_NAMES", "Constant", "Constants", "NotConstant", "as_constant", "assigned_names",
           "evaluate_constant", "literal_sizes", "module_constants", "resolve_overrides"]

#: A module constant's value as this evaluator computes it (and as ``CPU_SIZES`` sets one).
Constant: TypeAlias = "bool | int | float | str | tuple[Constant, ...] | list[Constant] | None"
#: Module constants by name.
Constants: TypeAlias = "dict[str, Constant]"

# The operators take and give what Python's do; `as_constant` checks each result.
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_CALLS: dict[str, Callable[..., Any]] = {"int": int, "float": float, "min": min, "max": max, "abs": abs,
                                         "round": round, "tuple": tuple, "list": list, "len": len}
#: The problem file's declarations (`problems.spec`): module-level literals that are not sizes.
DECLARATION_NAMES = frozenset({
    "MODE", "POLICY", "ATOL", "RTOL", "CPU_SIZES", "EXTRA_SHAPES", "INPUT_VARIANTS", "NONDETERMINISTIC", "RANDOM",
    "DESCRIPTION",
})
#: A constant larger than this is not evaluated (``2 ** 10 ** 9`` must not hang the parser).
_MAX_INT_BITS = 128


class NotConstant(Exception):
    """An expression this evaluator does not compute (a call, an attribute, an unknown name)."""


def as_constant(value: object) -> Constant:
    """``value`` if it is a `Constant` (a list's or tuple's items checked too).

    Raises:
        NotConstant: anything else (a dict, a set, bytes, a complex number, Ellipsis …).
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple):
        return tuple(as_constant(v) for v in value)
    if isinstance(value, list):
        return [as_constant(v) for v in value]
    raise NotConstant(type(value).__name__)


def evaluate_constant(node: ast.expr, known: Mapping[str, Constant]) -> Constant:
    """The value of expression ``node`` with the names in ``known`` bound (nothing runs).

    Raises:
        NotConstant: an expression this evaluator does not compute.
    """
    if isinstance(node, ast.Constant):
        return as_constant(node.value)
    if isinstance(node, ast.Name):
        if node.id in known:
            return known[node.id]
        raise NotConstant(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = tuple(evaluate_constant(e, known) for e in node.elts)
        return items if isinstance(node, ast.Tuple) else list(items)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        try:
            return as_constant(_UNARY[type(node.op)](evaluate_constant(node.operand, known)))
        except TypeError as exc:
            raise NotConstant(str(exc)) from None
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = evaluate_constant(node.left, known), evaluate_constant(node.right, known)
        if isinstance(node.op, ast.Pow) and isinstance(right, int) and abs(right) > _MAX_INT_BITS:
            raise NotConstant("exponent too large")
        try:
            value = as_constant(_BINARY[type(node.op)](left, right))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
            raise NotConstant(str(exc)) from None
        if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
            raise NotConstant("integer too large")
        return value
    if isinstance(node, ast.Subscript):
        container, index = evaluate_constant(node.value, known), evaluate_constant(node.slice, known)
        if not isinstance(container, tuple | list | str) or not isinstance(index, int):
            raise NotConstant("a subscript that is not an index into a tuple, list or string")
        try:
            return as_constant(container[index])
        except IndexError as exc:
            raise NotConstant(str(exc)) from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS \
            and not node.keywords:
        args = [evaluate_constant(a, known) for a in node.args]
        try:
            return as_constant(_CALLS[node.func.id](*args))
        except (TypeError, ValueError) as exc:
            raise NotConstant(str(exc)) from None
    raise NotConstant(type(node).__name__)


def _bind(target: ast.expr, value: Constant, known: Constants, overrides: Mapping[str, Constant]) -> None:
    """Bind ``value`` to ``target`` (a name, or a tuple/list of them); an override wins."""
    if isinstance(target, ast.Name):
        known[target.id] = overrides.get(target.id, value)
        return
    if isinstance(target, (ast.Tuple, ast.List)):
        if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
            raise NotConstant("unpacking mismatch")
        for element, item in zip(target.elts, value, strict=True):
            _bind(element, item, known, overrides)
        return
    raise NotConstant(type(target).__name__)


def _names_in(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _names_in(e)]
    if isinstance(target, ast.Starred):
        return _names_in(target.value)
    return []


def _assignments(tree: ast.Module) -> list[tuple[list[ast.expr], ast.expr]]:
    found: list[tuple[list[ast.expr], ast.expr]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            found.append((list(node.targets), node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            found.append(([node.target], node.value))
    return found


def assigned_names(tree: ast.Module) -> set[str]:
    """Every name a top-level assignment binds, unpacking tuple and list targets."""
    return {name for targets, _ in _assignments(tree) for t in targets for name in _names_in(t)}


def module_constants(tree: ast.Module, overrides: Mapping[str, Constant] | None = None) -> Constants:
    """The module's top-level constants, evaluated in order with ``overrides`` replacing theirs.

    A name whose value this evaluator cannot compute is left out, and so is everything computed
    from it; a name that is overridden but not computable keeps the override.
    """
    overrides = overrides or {}
    known: Constants = {}
    for targets, value in _assignments(tree):
        try:
            evaluated = evaluate_constant(value, known)
        except NotConstant:
            for target in targets:
                for name in _names_in(target):
                    if name in overrides:
                        known[name] = overrides[name]
                    else:
                        known.pop(name, None)  # a later non-constant rebinding hides an earlier one
            continue
        for target in targets:
            try:
                _bind(target, evaluated, known, overrides)
            except NotConstant:
                for name in _names_in(target):
                    known.pop(name, None)
    return known


def literal_sizes(tree: ast.Module) -> dict[str, int | tuple[int, ...]]:
    """The size constants set from literals (not derived from other constants): integers of at
    least 2 and tuples/lists of them, by name, with their values."""
    reads_names: set[str] = set()
    for targets, value in _assignments(tree):
        if any(isinstance(n, ast.Name) for n in ast.walk(value)):
            reads_names.update(name for t in targets for name in _names_in(t))
    found: dict[str, int | tuple[int, ...]] = {}
    for name, constant in module_constants(tree).items():
        if name in reads_names or name in DECLARATION_NAMES:
            continue
        if isinstance(constant, int) and not isinstance(constant, bool) and constant >= 2:
            found[name] = constant
        elif isinstance(constant, (tuple, list)) and constant:
            dims = [v for v in constant if isinstance(v, int) and not isinstance(v, bool)]
            if len(dims) == len(constant):
                found[name] = tuple(dims)
    return found


def resolve_overrides(source_or_tree: str | ast.Module, overrides: Mapping[str, Constant]) -> Constants:
    """``overrides`` plus every constant whose value they change (``input_shape`` when
    ``batch_size`` is overridden), as the values to set on the loaded module."""
    if not overrides:
        return {}
    tree = ast.parse(source_or_tree) if isinstance(source_or_tree, str) else source_or_tree
    base = module_constants(tree)
    changed = module_constants(tree, overrides)
    resolved = {name: value for name, value in changed.items() if name not in base or base[name] != value}
    resolved.update(overrides)
    return resolved
