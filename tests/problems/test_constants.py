"""Size constants read statically: tuple/list unpacking, derived constants, overrides that flow."""

from __future__ import annotations

import ast

import pytest

from problems import ProblemFormatError, parse_problem
from problems.constants import literal_sizes, module_constants, resolve_overrides

BODY = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x
def get_inputs():
    return [torch.randn(*input_shape)]
def get_init_inputs():
    return []
'''

TUPLE_SIZES = ("batch_size = 16\nD, H, W = 24, 32, 32\n[c_in, c_out] = [3, 8]\n"
               "input_shape = (batch_size, c_in, D, H, W)\n")
DERIVED = "batch_size = 4096\ndim = 393216\ninput_shape = (batch_size, dim)\nhidden = dim // 4 * 2\n"


def test_tuple_and_list_unpacking_are_constants_cpu_sizes_may_name() -> None:
    source = TUPLE_SIZES + BODY + 'CPU_SIZES = {"D": 4, "H": 8, "W": 8, "c_out": 2}\n'
    problem = parse_problem(source, problem_id="user/tuples")
    assert module_constants(ast.parse(source))["H"] == 32
    overrides = problem.size_overrides("cpu")
    assert overrides["input_shape"] == (16, 3, 4, 8, 8)
    assert overrides["c_out"] == 2 and "batch_size" not in overrides
    assert problem.size_overrides("cuda") == {}


def test_an_override_of_batch_size_flows_into_derived_constants() -> None:
    source = DERIVED + BODY + 'CPU_SIZES = {"batch_size": 2, "dim": 64}\nEXTRA_SHAPES = [{"dim": 40}]\n'
    problem = parse_problem(source, problem_id="user/derived")
    assert problem.size_overrides("cpu") == {"batch_size": 2, "dim": 64, "input_shape": (2, 64), "hidden": 32}
    # An extra shape applies on top of the CPU sizes on cpu, on the full sizes on cuda.
    (on_cpu,) = problem.trial_shapes("cpu")
    assert on_cpu["input_shape"] == (2, 40) and on_cpu["hidden"] == 20
    (on_cuda,) = problem.trial_shapes("cuda")
    assert on_cuda["input_shape"] == (4096, 40) and "batch_size" not in on_cuda


def test_a_derived_constant_may_be_overridden_itself() -> None:
    resolved = resolve_overrides(DERIVED, {"input_shape": [3, 5]})
    assert resolved == {"input_shape": [3, 5]}


def test_unknown_names_are_still_refused_and_computed_values_are_left_alone() -> None:
    with pytest.raises(ProblemFormatError, match=r"does not define: \['depth'\]"):
        parse_problem(TUPLE_SIZES + BODY + 'CPU_SIZES = {"depth": 2}\n', problem_id="user/bad")
    source = "import math\nn = 8\nm = math.prod([n, 2])\nk = m + 1\nj = n * 2\n"
    constants = module_constants(ast.parse(source))
    assert constants == {"n": 8, "j": 16}  # m is a call of its own; k is computed from it
    assert resolve_overrides(source, {"n": 4}) == {"n": 4, "j": 8}


def test_unpacking_a_constant_tuple_and_indexing_it() -> None:
    source = "shape = (8, 16)\nrows, cols = shape\nlast = shape[-1] * 2\n"
    assert resolve_overrides(source, {"shape": (2, 4)}) == {"shape": (2, 4), "rows": 2, "cols": 4, "last": 8}


def test_literal_sizes_are_the_scalable_constants() -> None:
    source = DERIVED + "kernel_size = 3\nscale = 0.5\nshape = (64, 128)\nATOL = 1e-3\nflag = True\n"
    assert literal_sizes(ast.parse(source)) == {"batch_size": 4096, "dim": 393216, "kernel_size": 3,
                                                "shape": (64, 128)}


def test_huge_exponents_are_not_evaluated() -> None:
    assert "x" not in module_constants(ast.parse("x = 2 ** 10 ** 9\n"))


def test_constants_are_what_a_size_can_be() -> None:
    from problems.constants import NotConstant, as_constant

    assert as_constant((1, [2.5, "x"], None, True)) == (1, [2.5, "x"], None, True)
    for value in ({"a": 1}, {1, 2}, b"raw", 1j, ...):
        with pytest.raises(NotConstant):
            as_constant(value)
    # An expression whose value is no Constant is not a constant (the name is left out).
    constants = module_constants(ast.parse("a = 2\nz = (-1) ** 0.5\nb = b'x'\nc = -'s'\nd = (3, 4)[1]\n"))
    assert constants == {"a": 2, "d": 4}


def test_a_cpu_size_that_is_no_constant_is_refused_with_its_name() -> None:
    with pytest.raises(ProblemFormatError, match=r"CPU_SIZES\['dim'\] must be a number"):
        parse_problem(DERIVED + BODY + 'CPU_SIZES = {"dim": {"nested": 1}}\n', problem_id="user/dict_size")


def test_a_problem_reads_back_from_its_fields() -> None:
    from problems import Problem

    problem = parse_problem(DERIVED + BODY + 'CPU_SIZES = {"batch_size": 2}\n', problem_id="user/p", level=2)
    assert Problem.from_dict(problem.to_dict()) == problem
    with pytest.raises(ProblemFormatError, match="source and id"):
        Problem.from_dict({"id": "user/p"})
    with pytest.raises(ProblemFormatError, match="level"):
        Problem.from_dict({**problem.to_dict(), "level": "2"})
