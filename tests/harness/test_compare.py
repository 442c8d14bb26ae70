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


def _by_masks(ref: torch.Tensor, out: torch.Tensor, tol_a: float, tol_r: float) -> tuple[int, float, float]:
    """The rule written out element by element: (mismatched, max abs error, error sum)."""
    r, o = ref.double(), out.double()
    finite = torch.isfinite(r) & torch.isfinite(o)
    diff = torch.where(finite, (o - r).abs(), torch.zeros_like(r))
    special_bad = ~finite & ~((torch.isnan(r) & torch.isnan(o)) | (r == o))
    bad = ((diff > tol_a + tol_r * r.abs()) & finite) | special_bad
    worst = float("inf") if bool(special_bad.any()) else float(diff.max())
    return int(bad.sum()), worst, float(diff.sum())


def test_the_all_finite_path_gives_the_figures_of_the_rule_and_leaves_float64_inputs_alone() -> None:
    torch.manual_seed(5)
    for dtype in (torch.float32, torch.float16, torch.float64):
        ref = torch.randn(300, 70, dtype=dtype)
        out = ref + (torch.rand_like(ref) < 0.1) * torch.randn_like(ref) * 1e-2  # some within, some outside
        kept = (ref.clone(), out.clone())
        tol = default_tolerance(str(dtype).removeprefix("torch."))
        result = cmp(ref, out)
        mismatched, worst, total = _by_masks(ref, out, tol, tol)
        assert result.mismatch_frac == mismatched / ref.numel() and result.max_abs_err == worst
        assert result.mean_abs_err == total / ref.numel() and result.passed is (mismatched == 0)
        assert torch.equal(ref, kept[0]) and torch.equal(out, kept[1])
        out[7, 3] = float("nan")  # a non-finite element: the masked path, the same rule
        assert cmp(ref, out).mismatch_frac == (_by_masks(ref, out, tol, tol)[0]) / ref.numel()
