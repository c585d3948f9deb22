"""FakeQuant has no forward op to check it against: its reference is proven here against exact rational arithmetic
(fractions.Fraction: the exact quotient, Python's round() of a Fraction rounds half to even), element by element on
every valid case of the spec's nightly tier. FakeQuantGrad (the straight-through estimator, no gradient check by
design) is proven against an element-by-element selection, and the validity hooks against their rules."""
import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference.ops.fake_quant import fake_quant_grad, fake_quant_op, grad_shape_check, qparams_check, qparams_values_check


def _exact(x: float, s: float, zp: float, lo: int, hi: int) -> tuple[float, bool]:
    if math.isnan(x):
        return math.nan, False
    if math.isinf(x):
        q = math.inf if x > 0 else -math.inf
    else:
        q = round(Fraction(x) / Fraction(s)) + int(zp)  # Fraction.__round__: half to even
    mask = lo <= q <= hi
    qc = min(hi, max(lo, q))
    return float((Fraction(int(qc)) - Fraction(zp)) * Fraction(s)), mask


def test_reference_is_the_exact_quantization(catalog):
    checked = ties = 0
    for case in cases_of(catalog, "FakeQuant", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        x, s, zp = inputs["input"], inputs["scale"], inputs["zero_point"]
        lo, hi = int(case.attributes.get("quant_min", 0)), int(case.attributes.get("quant_max", 255))
        out, mask = fake_quant_op(x, s, zp, quant_min=lo, quant_max=hi)
        sv, zv = float(np.asarray(s).reshape(-1)[0]), float(np.asarray(zp).reshape(-1)[0])
        flat = np.asarray(x, np.float64).reshape(-1)
        if flat.size > 5000:
            flat = flat[:: flat.size // 5000]  # a sample of the large ones: Fractions are slow
            got_out = np.asarray(out).reshape(-1)[:: np.asarray(x).size // 5000]
            got_mask = np.asarray(mask).reshape(-1)[:: np.asarray(x).size // 5000]
        else:
            got_out, got_mask = np.asarray(out).reshape(-1), np.asarray(mask).reshape(-1)
        for v, o, m in zip(flat, got_out, got_mask):
            want_o, want_m = _exact(float(v), sv, zv, lo, hi)
            assert bool(m) == want_m and (o == want_o or (math.isnan(o) and math.isnan(want_o))), (case.id, v, o, want_o)
            ties += not math.isinf(v) and not math.isnan(v) and (Fraction(float(v)) / Fraction(sv)).denominator == 2
        assert np.asarray(mask).dtype == bool and np.shape(out) == np.shape(x)
        checked += 1
    assert checked >= 15 and ties >= 10, (checked, ties)


def test_ties_round_to_even():
    out, mask = fake_quant_op(np.array([0.25, 0.75, 1.25, -0.25, -0.75, -1.25]), np.array(0.5), np.array(0.0),
                              quant_min=-128, quant_max=127)
    np.testing.assert_array_equal(out, [0.0, 1.0, 1.0, -0.0, -1.0, -1.0])
    assert mask.all()


def test_grad_selects():
    dy = np.array([1.0, np.nan, np.inf, -2.0, np.nan])
    m = np.array([True, False, False, False, True])
    got = fake_quant_grad(dy, m)
    want = np.array([d if k else 0.0 for d, k in zip(dy, m)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("s, zp, ok", [(0.1, 3.0, True), (0.0, 3.0, False), (-0.1, 3.0, False), (np.inf, 0.0, False),
                                       (np.nan, 0.0, False), (0.1, 3.5, False), (0.1, -7.0, True), (0.1, np.inf, False)])
def test_qparam_values(s, zp, ok):
    assert (qparams_values_check({"scale": np.float32(s), "zero_point": np.float32(zp)}, {}) is None) == ok


@pytest.mark.parametrize("shape, attrs, ok", [((), {}, True), ((1,), {}, True), ((1, 1), {}, False), ((2,), {}, False),
                                              ((), {"quant_min": 5, "quant_max": 5}, True),
                                              ((), {"quant_min": 6, "quant_max": 5}, False)])
def test_qparam_shapes_and_range(shape, attrs, ok):
    assert (qparams_check({"input": (3,), "scale": shape, "zero_point": shape}, attrs) is None) == ok
    assert grad_shape_check({"dY": (3, 4), "gradient_mask": (3, 4)}, {}) is None
    assert grad_shape_check({"dY": (3, 4), "gradient_mask": (4, 3)}, {}) is not None
