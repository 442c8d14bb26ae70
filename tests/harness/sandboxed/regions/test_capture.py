"""What cannot be captured is named with its reason; the parts that can still give regions."""

from __future__ import annotations

import torch

from harness.sandboxed.regions.capture import capture_units
from problems import parse_problem
from tests.support.models import DATA_DEPENDENT, UNTRACEABLE, load_in_process


def _capture(source: str):
    module = load_in_process(parse_problem(source, problem_id="bad.py"))
    model = module.Model(*module.get_init_inputs())
    inputs = module.get_inputs()
    return capture_units(model, inputs, full=inputs, cpu=inputs, constants={}, model_file="problem:",
                         model_source=source)


def test_control_flow_on_tensor_values_leaves_the_model_out_but_its_submodules_in() -> None:
    units, failures, notes = _capture(DATA_DEPENDENT)
    assert [u.path for u in units] == ["norm", "fc"]
    assert [f.path for f in failures] == [""]
    assert "problem:bad.py, line 13: if y.sum() > 0:" in failures[0].reason
    assert "data-dependent" in failures[0].reason.lower() or "guard" in failures[0].reason.lower()
    assert any("could not be captured" in n for n in notes)


def test_a_model_with_nothing_capturable_has_no_units_and_says_why() -> None:
    units, failures, _ = _capture(UNTRACEABLE)
    assert units == [] and len(failures) == 1 and "line 7: if x.max() > 0.5:" in failures[0].reason
    assert isinstance(failures[0].reason, str) and torch  # the reason is text for people
