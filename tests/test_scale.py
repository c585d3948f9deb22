"""Scale has no forward op to check it against: its reference is proven here against an independent formula,
exact rational arithmetic (fractions.Fraction) rounded once to float64, on every valid case of the spec's nightly
tier; plus the validity rules (division by zero, one-element scale) the spec's hooks enforce."""
from fractions import Fraction

import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference.ops.scale import scale_op, scale_shape_check, scale_value_check


def _exact(x: float, s: float, down: int) -> float:
    """x * s or x / s, IEEE-754 float64 as the math rounded once; inf and NaN as IEEE defines them."""
    if not (np.isfinite(x) and np.isfinite(s)):
        with np.errstate(all="ignore"):
            return float(np.float64(x) / np.float64(s) if down else np.float64(x) * np.float64(s))
    q = Fraction(x) / Fraction(s) if down else Fraction(x) * Fraction(s)
    sign_zero = np.copysign(1.0, x) * np.copysign(1.0, s)
    if q == 0:
        return float(np.copysign(0.0, sign_zero))
    try:
        return float(q)  # Fraction -> float rounds to nearest, ties to even
    except OverflowError:
        return float(np.copysign(np.inf, sign_zero))


def test_reference_is_the_exact_product_or_quotient_rounded_once(catalog):
    checked = 0
    for case in cases_of(catalog, "Scale", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        x, s = inputs["input"], inputs["scale"]
        down = int(case.attributes.get("scale_down", 0))
        got = scale_op(x, s, down)
        sv = float(np.asarray(s).reshape(-1)[0])
        want = np.array([_exact(float(v), sv, down) for v in x.astype(np.float64).reshape(-1)]).reshape(x.shape)
        assert got.dtype == np.float64 and got.shape == x.shape, case.id
        assert got.tobytes() == want.tobytes() or np.array_equal(got, want, equal_nan=True), case.id
        checked += 1
    assert checked >= 60


def test_the_nightly_tier_covers_the_contract(catalog):
    cases = [c for c in cases_of(catalog, "Scale", "nightly") if c.valid]
    assert {c.dtype for c in cases} == {"float32", "float64", "float16"}
    assert {c.params.get("ScaleT") for c in cases} >= {None, "int32", "int64", "float16", "float64"}
    assert {c.attributes.get("scale_down", 0) for c in cases} == {0, 1}
    assert any(c.params["shape"] == [] for c in cases) and any(0 in c.params["shape"] for c in cases)
    smoke_ci = [c for c in cases_of(catalog, "Scale", "ci")]
    assert len(smoke_ci) <= 20


@pytest.mark.parametrize("s, down, problem", [
    (0.0, 1, True), (-0.0, 1, True), (0, 1, True), (0.0, 0, False), (1e-300, 1, False), (np.nan, 1, False)])
def test_division_by_zero_is_the_only_invalid_value(s, down, problem):
    scale = np.array(s, np.int64 if isinstance(s, int) else np.float64)
    assert (scale_value_check({"input": np.ones(3), "scale": scale}, {"scale_down": down}) is not None) == problem


@pytest.mark.parametrize("shape, ok", [((), True), ((1,), True), ((1, 1), True), ((2,), False), ((0,), False)])
def test_scale_holds_exactly_one_value(shape, ok):
    assert (scale_shape_check({"input": (3,), "scale": shape}, {}) is None) == ok


def test_integer_scales_are_read_exactly():
    x = np.array([1.0, 3.0])
    np.testing.assert_array_equal(scale_op(x, np.array(2 ** 53 - 1, np.int64), 0), x * float(2 ** 53 - 1))
    np.testing.assert_array_equal(scale_op(x, np.array([16777217], np.int32), 1), x / 16777217.0)
