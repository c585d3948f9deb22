"""Comparison rules: atol + rtol * |expected|, NaN and infinity patterns, signed zero, ULP distance."""
import ml_dtypes
import numpy as np
import pytest

from harness.core.compare import Tolerance, compare
from harness.core.dtypes import ulp_distance

TOL = Tolerance(atol=1e-5, rtol=1e-4, source="test")


def test_inside_and_outside_tolerance():
    expected = np.array([1.0, 100.0, 0.0])
    inside = compare(np.array([1.0 + 1e-4, 100.0 + 1e-2, 9e-6], np.float32), expected, "float32", TOL)
    assert inside.passed and inside.mismatches == 0 and 0.9 < inside.budget_used <= 1.0
    outside = compare(np.array([1.0, 100.0 + 2e-2, 0.0], np.float32), expected, "float32", TOL)
    assert not outside.passed and outside.mismatches == 1
    assert outside.worst["index"] == [1] and outside.budget_used == pytest.approx(2e-2 / (1e-5 + 1e-2), rel=1e-3)
    assert "1 of 3 element(s) outside tolerance" in outside.problems[0]


def test_nan_positions_must_match():
    expected = np.array([np.nan, 1.0])
    assert compare(np.array([np.nan, 1.0], np.float32), expected, "float32", TOL).passed
    missing = compare(np.array([0.0, 1.0], np.float32), expected, "float32", TOL)
    assert not missing.passed and "NaN expected but a number returned at 1 element(s), first at [0]" in missing.problems
    extra = compare(np.array([np.nan, np.nan], np.float32), expected, "float32", TOL)
    assert not extra.passed and "NaN returned where a number was expected" in extra.problems[0]


def test_infinities_must_match_in_sign():
    expected = np.array([np.inf, -np.inf, 1.0])
    assert compare(np.array([np.inf, -np.inf, 1.0], np.float32), expected, "float32", TOL).passed
    assert not compare(np.array([-np.inf, -np.inf, 1.0], np.float32), expected, "float32", TOL).passed
    assert not compare(np.array([np.inf, -np.inf, np.inf], np.float32), expected, "float32", TOL).passed
    assert not compare(np.array([3e38, -np.inf, 1.0], np.float32), expected, "float32", TOL).passed


def test_signed_zero_is_ignored():
    result = compare(np.array([-0.0, 0.0], np.float32), np.array([0.0, -0.0]), "float32", Tolerance(0, 0, "exact"))
    assert result.passed and result.max_ulp == 0


def test_exact_tolerance_rejects_any_difference():
    result = compare(np.array([np.nextafter(np.float32(1), np.float32(2))]), np.array([1.0]), "float32", Tolerance(0, 0, "exact"))
    assert not result.passed and result.max_ulp == 1


def test_shape_mismatch_fails():
    result = compare(np.zeros((2, 3), np.float32), np.zeros((3, 2)), "float32", TOL)
    assert not result.passed and result.problems == ["shape [2, 3], expected [3, 2]"]


def test_empty_tensors_pass():
    assert compare(np.zeros((0, 4), np.float32), np.zeros((0, 4)), "float32", TOL).passed


@pytest.mark.parametrize("dtype, np_dtype", [("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16),
                                             ("float32", np.float32), ("float64", np.float64)])
def test_ulp_distance_counts_representable_values(dtype, np_dtype):
    one = np.array([1.0], np_dtype)
    up = one.copy()
    for _ in range(3):
        up = np.nextafter(up.astype(np.float64), 2.0).astype(np_dtype) if dtype == "bfloat16" else np.nextafter(up, np_dtype(2))
    if dtype == "bfloat16":  # nextafter on float64 rounds back; step by bfloat16's epsilon instead
        up = np.array([1.0 + 3 * float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)], np_dtype)
    assert ulp_distance(up, one, dtype)[0] == 3
    # Across zero: the distance from the smallest negative subnormal to the smallest positive one is 2.
    tiny = float(ml_dtypes.finfo(np_dtype).smallest_subnormal)
    assert ulp_distance(np.array([-tiny], np_dtype), np.array([tiny]), dtype)[0] == 2


def test_metrics_are_reported_for_a_pass():
    result = compare(np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0 + 1e-6]), "float32", TOL)
    assert result.passed and result.max_abs == pytest.approx(1e-6, rel=1e-3)
    assert result.max_rel == pytest.approx(5e-7, rel=1e-3)
    json = result.to_json()
    assert json["tolerance"] == {"atol": 1e-5, "rtol": 1e-4, "source": "test"}
