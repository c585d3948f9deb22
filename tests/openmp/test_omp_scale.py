"""Scale of the C library: input * s or input / s (a true division, not a float32 reciprocal), every scale type
read exactly, float16 through float32 rounded once, the same bits at any thread count, and every malformed input
(division by zero included) rejected with its status."""
from __future__ import annotations

import numpy as np
import pytest

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
SCALE_TYPES = [np.float16, np.float32, np.float64, np.int32, np.int64]
# the kernel in the dtype against the float64 formula rounded once (float32 and float16 go through double / float)
RTOL = {"float32": 2 ** -23, "float64": 2 ** -52, "float16": 2 ** -10}


def _formula(x, s, down):
    """The math in float64, written out elementwise (not the reference module)."""
    x = x.astype(np.float64)
    s = float(s.reshape(-1)[0])
    return np.array([v / s if down else v * s for v in x.reshape(-1)]).reshape(x.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("stype", SCALE_TYPES)
@pytest.mark.parametrize("down", [0, 1])
def test_multiplies_or_divides_by_the_one_value(lib, rng, dtype, stype, down):
    x = rng.normal(0, 2, (5, 37)).astype(DTYPES[dtype])
    s = np.array(3, stype)  # 3: 1/3 is not a binary fraction, so a reciprocal would show
    [y] = lib.run("Scale", [x, s], {"scale_down": down})
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_allclose(y.astype(np.float64), _formula(x, s, down), rtol=RTOL[dtype], atol=0)


def test_float64_is_not_computed_through_float32(lib, rng):
    x = rng.normal(0, 1, 64)
    [y] = lib.run("Scale", [x, np.array([0.1])], {"scale_down": 0})
    np.testing.assert_array_equal(y, x * 0.1)
    [y] = lib.run("Scale", [x, np.array(16777217, np.int64)], {"scale_down": 1})
    np.testing.assert_array_equal(y, x / 16777217.0)


def test_default_is_multiply_and_scale_zero_multiplies(lib):
    x = np.array([1.0, -2.0, np.inf], np.float32)
    [y] = lib.run("Scale", [x, np.array(2.0, np.float32)])
    np.testing.assert_array_equal(y, [2.0, -4.0, np.inf])
    [y] = lib.run("Scale", [x[:2], np.array([0.0], np.float32)], {"scale_down": 0})
    np.testing.assert_array_equal(y, [0.0, -0.0])


@pytest.mark.parametrize("shape", [(1,), (1, 1), ()])
def test_any_one_element_shape_is_the_scale(lib, shape):
    x = np.arange(6, dtype=np.float32)
    [y] = lib.run("Scale", [x, np.full(shape, 2.0, np.float32)], {"scale_down": 1})
    np.testing.assert_array_equal(y, x / 2)


@pytest.mark.parametrize("s", [3.0, 49.0, 768.0, 0.1, -12345.678, 1.0e30, 3.0e-38, 2.0 ** -1000])
def test_float32_division_is_the_double_quotient_rounded_once(lib, rng, s):
    """Bitwise float32(float64(x) / s) (csrc/scale.c's div_f32 multiplies by 1 / s and divides again where that
    could round differently): any float32 bits (subnormals, inf, NaN), x near s times a float32 rounding
    midpoint, results near and below float32's smallest normal."""
    bits = rng.integers(0, 2 ** 32, 60000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    a = np.abs(rng.normal(0, 1, 60000).astype(np.float32)) * np.float32(2.0) ** rng.integers(-60, 60, 60000).astype(np.float32)
    mid = (a.astype(np.float64) + np.nextafter(a, np.float32(np.inf)).astype(np.float64)) / 2
    with np.errstate(all="ignore"):
        near = (mid * s).astype(np.float32)
        tiny = (np.float64(2.0 ** -126) * s * rng.uniform(0, 4, 20000)).astype(np.float32)
        x = np.concatenate([bits, near, tiny, -near[:1000]])
        want = (x.astype(np.float64) / s).astype(np.float32)
    [y] = lib.run("Scale", [x, np.array(s)], {"scale_down": 1})
    np.testing.assert_array_equal(y.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
    assert np.isnan(y[np.isnan(want)]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_thread_counts_give_the_same_bits(lib, rng, dtype):
    x = rng.normal(0, 1, 200003).astype(DTYPES[dtype])
    outs = [lib.run("Scale", [x, np.array(7.0)], {"scale_down": 1}, threads=t)[0] for t in (1, 2, 3, 4)]
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()


def test_empty_and_scalar(lib):
    [y] = lib.run("Scale", [np.ones((3, 0), np.float32), np.array(2.0, np.float32)], {"scale_down": 1})
    assert y.shape == (3, 0)
    [y] = lib.run("Scale", [np.array(3.0), np.array(4, np.int64)])
    assert y.shape == () and y == 12.0


@pytest.mark.parametrize("change, attrs, status, words", [
    ({1: np.array([0.0], np.float32)}, {"scale_down": 1}, "OPC_ERR_INVALID_ARGUMENT", "division by zero"),
    ({1: np.array(-0.0, np.float64)}, {"scale_down": 1}, "OPC_ERR_INVALID_ARGUMENT", "division by zero"),
    ({1: np.array(0, np.int64)}, {"scale_down": 1}, "OPC_ERR_INVALID_ARGUMENT", "division by zero"),
    ({1: np.array([2.0, 2.0], np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "exactly one value, got shape [2]"),
    ({1: np.zeros(0, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "exactly one value, got shape [0]"),
    ({}, {"scale_down": 2}, "OPC_ERR_INVALID_ARGUMENT", "scale_down 2 must be 0 or 1"),
    ({1: np.array(True)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "scale has dtype bool"),
    ({0: np.ones(4, np.int32)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "dtype int32 is not supported"),
    ({1: None}, {}, "OPC_ERR_INVALID_ARGUMENT", "required input 1 (scale) is missing"),
])
def test_malformed_inputs_are_rejected(lib, change, attrs, status, words):
    ins = [np.ones(4, np.float32), np.array(2.0, np.float32)]
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run("Scale", ins, attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message
