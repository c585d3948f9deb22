"""FakeQuant and FakeQuantGrad of the C library: the quantization against an element-by-element float64 formula
(ties to even, the exact quotient's rounding rather than float32's), the straight-through selection, both outputs
bitwise the same at any thread count and for any subset of outputs, and every malformed input rejected."""
from __future__ import annotations

import math

import numpy as np
import pytest


def _formula(x, s, zp, lo, hi):
    """Element by element in float64 (not the reference module): round half to even of x / s."""
    out, mask = [], []
    for v in np.asarray(x, np.float64).reshape(-1):
        if math.isnan(v):
            out.append(math.nan), mask.append(False)
            continue
        q = (math.inf if v > 0 else -math.inf) if math.isinf(v) else float(round(v / s)) + zp  # round(): half even
        out.append((min(hi, max(lo, q)) - zp) * s), mask.append(lo <= q <= hi)
    return np.array(out).reshape(np.shape(x)), np.array(mask, bool).reshape(np.shape(x))


@pytest.mark.parametrize("lo, hi, zp", [(0, 255, 128.0), (-128, 127, 0.0), (-128, 127, -3.0), (0, 15, 7.0), (7, 7, 7.0)])
def test_matches_the_formula(lib, rng, lo, hi, zp):
    x = rng.normal(0, 8, (7, 37)).astype(np.float32)
    x[0, :6] = [np.inf, -np.inf, np.nan, 3e38, -3e38, 1e20]
    s = np.float32(0.075)
    out, mask = lib.run("FakeQuant", [x, np.array(s), np.array(zp, np.float32)], {"quant_min": lo, "quant_max": hi})
    want_out, want_mask = _formula(x, float(s), zp, lo, hi)
    assert out.dtype == np.float32 and mask.dtype == np.bool_
    np.testing.assert_array_equal(out, want_out.astype(np.float32))
    np.testing.assert_array_equal(mask, want_mask)


def test_ties_round_to_even_and_the_quotient_is_not_float32(lib):
    x = np.array([0.25, 0.75, 1.25, -0.25, -0.75, -1.25], np.float32)
    out, mask = lib.run("FakeQuant", [x, np.array(0.5, np.float32), np.array(0.0, np.float32)],
                        {"quant_min": -128, "quant_max": 127})
    np.testing.assert_array_equal(out, [0.0, 1.0, 1.0, -0.0, -1.0, -1.0])
    # 3.0375001f / 0.075f is 40.5000003 exactly but 40.5 in float32: the nearest is 41, not the even 40
    out, _ = lib.run("FakeQuant", [np.array([3.0375001], np.float32), np.array([0.075], np.float32),
                                   np.array([128.0], np.float32)])
    np.testing.assert_array_equal(out, np.float32(41 * np.float64(np.float32(0.075))))


def test_defaults_and_one_value_shapes(lib):
    x = np.array([1.0, 2.0, 10.0], np.float32)
    for shape in ((), (1,)):
        out, mask = lib.run("FakeQuant", [x, np.full(shape, 0.075, np.float32), np.full(shape, 128.0, np.float32)])
        np.testing.assert_array_equal(mask, [True, True, False])
        np.testing.assert_array_equal(out, np.float32([13 * np.float64(np.float32(0.075)),
                                                       27 * np.float64(np.float32(0.075)),
                                                       127 * np.float64(np.float32(0.075))]))


def test_grad_selects(lib, rng):
    dy = rng.normal(size=(5, 41)).astype(np.float32)
    dy[0, :3] = [np.nan, np.inf, -np.inf]
    m = rng.random((5, 41)) < 0.5
    m[0, :3] = False
    [dx] = lib.run("FakeQuantGrad", [dy, m])
    np.testing.assert_array_equal(dx, np.where(m, dy, np.float32(0)))


@pytest.mark.parametrize("n", [1, 65537, 200003])
def test_thread_counts_give_the_same_bits(lib, rng, n):
    x = rng.normal(0, 8, n).astype(np.float32)
    qp = [np.array(0.075, np.float32), np.array(128.0, np.float32)]
    runs = [lib.run("FakeQuant", [x, *qp], threads=t) for t in (1, 2, 3, 4)]
    grads = [lib.run("FakeQuantGrad", [x, runs[0][1]], threads=t)[0] for t in (1, 2, 3, 4)]
    for r, g in zip(runs[1:], grads[1:]):
        assert r[0].tobytes() == runs[0][0].tobytes() and r[1].tobytes() == runs[0][1].tobytes()
        assert g.tobytes() == grads[0].tobytes()


def test_any_subset_of_outputs_is_the_full_run(lib, rng):
    x = rng.normal(0, 8, 300).astype(np.float32)
    qp = [np.array(0.075, np.float32), np.array(128.0, np.float32)]
    full = lib.run("FakeQuant", [x, *qp])
    for want in ([True, False], [False, True]):
        part = lib.run("FakeQuant", [x, *qp], want_outputs=want)
        for w, a, b in zip(want, full, part):
            assert (b is None) if not w else a.tobytes() == b.tobytes()


def test_empty_and_scalar(lib):
    qp = [np.array(0.5, np.float32), np.array(0.0, np.float32)]
    out, mask = lib.run("FakeQuant", [np.ones((3, 0), np.float32), *qp])
    assert out.shape == mask.shape == (3, 0)
    out, mask = lib.run("FakeQuant", [np.array(1.25, np.float32), *qp])  # 2.5 rounds to 2
    assert out.shape == () and out == 1.0 and mask
    [dx] = lib.run("FakeQuantGrad", [np.ones((0, 2), np.float32), np.ones((0, 2), bool)])
    assert dx.shape == (0, 2)


def _good():
    return [np.ones((3, 4), np.float32), np.array(0.5, np.float32), np.array(0.0, np.float32)]


@pytest.mark.parametrize("change, attrs, status, words", [
    ({1: np.array(0.0, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "scale 0 must be finite and > 0"),
    ({1: np.array(-0.5, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "scale -0.5 must be finite and > 0"),
    ({1: np.array(np.nan, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "must be finite and > 0"),
    ({1: np.array(np.inf, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "must be finite and > 0"),
    ({2: np.array(1.5, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "zero_point 1.5 must be an integer value"),
    ({2: np.array(np.inf, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "must be an integer value"),
    ({1: np.ones((1, 1), np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "scale must be a scalar or [1], got shape [1, 1]"),
    ({2: np.zeros(2, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "zero_point must be a scalar or [1], got shape [2]"),
    ({}, {"quant_min": 6, "quant_max": 5}, "OPC_ERR_INVALID_ATTRIBUTE", "quant_min 6 > quant_max 5"),
    ({0: np.ones((3, 4), np.float64)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "float64"),
    ({1: np.array(0.5, np.float64)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "scale"),
    ({2: None}, {}, "OPC_ERR_INVALID_ARGUMENT", "required input 2 (zero_point) is missing"),
])
def test_fake_quant_rejects_malformed_inputs(lib, change, attrs, status, words):
    ins = _good()
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run("FakeQuant", ins, attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message


@pytest.mark.parametrize("ins, status, words", [
    ([np.ones(3, np.float32), np.ones(2, bool)], "OPC_ERR_INVALID_ARGUMENT", "gradient_mask shape [2] differs from dY shape [3]"),
    ([np.ones(2, np.float32), np.ones(3, bool)], "OPC_ERR_INVALID_ARGUMENT", "differs from dY shape [2]"),
    ([np.ones(3, np.float32), np.ones(3, np.float32)], "OPC_ERR_UNSUPPORTED_DTYPE", "gradient_mask has dtype float32"),
    ([np.ones(3, np.float64), np.ones(3, bool)], "OPC_ERR_UNSUPPORTED_DTYPE", "float64"),
    ([np.ones(3, np.float32), None], "OPC_ERR_INVALID_ARGUMENT", "required input 1 (gradient_mask) is missing"),
])
def test_fake_quant_grad_rejects_malformed_inputs(lib, ins, status, words):
    with pytest.raises(lib.KernelError) as e:
        lib.run("FakeQuantGrad", ins)
    assert e.value.status_name == status and words in e.value.message, e.value.message
