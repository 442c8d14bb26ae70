import math

import torch

from harness.options import default_tolerance
from harness.sandboxed.compare import compare_outputs


def cmp(expected, actual, atol=None, rtol=None):
    return compare_outputs([expected] if isinstance(expected, torch.Tensor) else expected, actual,
                           atol=atol, rtol=rtol, tolerance_for=default_tolerance)


def test_within_default_fp32_tolerance_passes_and_reports_errors() -> None:
    ref = torch.randn(64, 64)
    result = cmp(ref, ref + 5e-5)
    assert result.passed and result.mismatch_frac == 0.0
    assert math.isclose(result.max_abs_err, 5e-5, rel_tol=1e-2)


def test_one_bad_element_fails_with_its_fraction() -> None:
    ref = torch.zeros(10, 10)
    out = ref.clone()
    out[3, 4] = 1.0
    result = cmp(ref, out)
    assert not result.passed
    assert result.mismatch_frac == 0.01 and result.max_abs_err == 1.0
    assert "1 of 100" in result.message


def test_nan_must_match_in_place() -> None:
    ref = torch.tensor([1.0, float("nan"), float("inf")])
    assert cmp(ref, ref.clone()).passed
    assert not cmp(ref, torch.tensor([1.0, 0.0, float("inf")])).passed
    assert not cmp(ref, torch.tensor([float("nan"), float("nan"), float("inf")])).passed
    assert not cmp(ref, torch.tensor([1.0, float("nan"), float("-inf")])).passed


def test_shape_dtype_and_structure_must_match_exactly() -> None:
    ref = torch.randn(4, 4)
    assert "shape" in cmp(ref, ref.reshape(16)).message
    assert "dtype" in cmp(ref, ref.double()).message
    assert "expected 1" in cmp(ref, (ref, ref)).message
    assert "expected tensor" in cmp(ref, 3.0).message


def test_integers_compare_exactly_and_half_precision_gets_1e_2() -> None:
    idx = torch.tensor([1, 2, 3])
    assert not cmp(idx, torch.tensor([1, 2, 4])).passed
    ref = torch.ones(8, dtype=torch.bfloat16)
    assert cmp(ref, ref + 0.0078125).passed  # one bf16 ulp at 1.0, inside 1e-2 relative
    assert not cmp(ref, ref + 0.0625).passed


def test_problem_override_replaces_the_default() -> None:
    ref = torch.ones(4)
    assert not cmp(ref, ref + 1e-3).passed
    assert cmp(ref, ref + 1e-3, atol=2e-3, rtol=0.0).passed
