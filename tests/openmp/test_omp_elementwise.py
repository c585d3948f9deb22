"""Elementwise activation gradients of the C library against float64 NumPy formulas."""
from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import yaml

from .omp_helpers import assert_close, norm_cdf

BF16 = ml_dtypes.bfloat16
SPEC_TOL = yaml.safe_load((Path(__file__).parents[2] / "specs/_defaults/tolerances.yaml").read_text())["tolerances"]

A = math.sqrt(2.0 / math.pi)
G = 0.044715


def ref(op, dy, x, alpha=None, b=None):
    """float64 formula on the given (already rounded) inputs; bias added in the input dtype."""
    if b is not None:
        x = x + b  # formed in the case dtype first, as the op defines
    dy = dy.astype(np.float64)
    x = x.astype(np.float64)
    if op == "ReluGrad":
        return np.where(x > 0, dy, 0.0)
    if op == "SigmoidGrad":
        return dy * x * (1 - x)
    if op == "TanhGrad":
        return dy * (1 - x * x)
    if op == "LeakyReluGrad":
        return np.where(x > 0, dy, alpha * dy)
    if op == "QuickGeluGrad":
        v = alpha * x
        s = 1 / (1 + np.exp(-v))
        return dy * s * (1 + v * (1 - s))
    if op in ("GeluGrad", "BiasGeluGrad_dX"):
        return dy * (norm_cdf(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
    if op in ("FastGeluGrad", "BiasFastGeluGrad_dX"):
        t = np.tanh(A * x + A * G * x**3)
        return dy * 0.5 * (1 + t + (1 - t * t) * (A * x + 3 * A * G * x**3))
    raise AssertionError(op)


UNARY = ["ReluGrad", "SigmoidGrad", "TanhGrad", "LeakyReluGrad", "QuickGeluGrad", "GeluGrad", "FastGeluGrad"]
TOL = {np.float32: (2e-6, 2e-5), np.float64: (1e-13, 1e-11)}


def inputs(rng, op, shape, dtype):
    n = int(np.prod(shape))
    x = np.concatenate([rng.normal(0, 3, n - n // 2), rng.uniform(-20, 20, n // 2)])
    if op in ("SigmoidGrad",):
        x = rng.uniform(-0.5, 1.5, n)
    if op in ("TanhGrad",):
        x = rng.uniform(-1.5, 1.5, n)
    return rng.normal(size=n).reshape(shape).astype(dtype), x.reshape(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("shape", [(7,), (3, 5, 11), (1000,), (0, 4)])
def test_unary_values(lib, rng, op, dtype, shape):
    dy, x = inputs(rng, op, shape, dtype)
    attrs = {}
    alpha = None
    if op == "QuickGeluGrad":
        alpha = 1.702
    if op == "LeakyReluGrad":
        alpha = 0.01
    (dx,) = lib.run(op, [dy, x], attrs)
    assert dx.dtype == dtype and dx.shape == shape
    a32 = np.float32(alpha) if (alpha is not None and dtype == np.float32) else alpha
    atol, rtol = TOL[dtype]
    assert_close(dx, ref(op, dy, x, a32 if a32 is None else float(a32)), atol, rtol, op)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op,alpha", [("QuickGeluGrad", 1.0), ("QuickGeluGrad", -1.702),
                                      ("QuickGeluGrad", 0.3), ("LeakyReluGrad", 0.2),
                                      ("LeakyReluGrad", -0.5)])
def test_alpha_attribute(lib, rng, op, alpha, dtype):
    dy, x = inputs(rng, op, (257,), dtype)
    (dx,) = lib.run(op, [dy, x], {"alpha": alpha})
    a = float(np.float32(alpha)) if dtype == np.float32 else alpha
    atol, rtol = TOL[dtype]
    assert_close(dx, ref(op, dy, x, a), atol, rtol, f"{op} alpha={alpha}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["BiasGeluGrad_dX", "BiasFastGeluGrad_dX"])
@pytest.mark.parametrize("shape", [(2, 3, 4), (5, 33), (70000, 3), (4,)])
def test_bias_values(lib, rng, op, dtype, shape):
    dy, x = inputs(rng, op, shape, dtype)
    b = rng.normal(0, 2, shape[-1]).astype(dtype)
    (dx,) = lib.run(op, [dy, x, b], {}, threads=2)
    atol, rtol = TOL[dtype]
    assert_close(dx, ref(op, dy, x, b=b), atol, rtol, op)


def test_bias_empty_last_dim(lib):
    x = np.zeros((2, 3, 0), np.float32)
    (dx,) = lib.run("BiasGeluGrad_dX", [x, x, np.zeros(0, np.float32)], {})
    assert dx.shape == (2, 3, 0)


SPECIAL_X = [np.inf, -np.inf, np.nan, 1e30, -1e30, 3.0e38, -3.0e38, 1e13, -1e13, 0.0, -0.0, 1e-30]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, BF16])
@pytest.mark.parametrize("op", ["GeluGrad", "FastGeluGrad", "QuickGeluGrad"])
def test_gelu_family_limits(lib, op, dtype):
    """Limits of the derivative: 1 at +inf / huge x, 0 at -inf / huge -x, NaN only from NaN."""
    with np.errstate(over="ignore"):
        x = np.array(SPECIAL_X).astype(dtype)  # float16: the huge values become +-inf
    dy = np.ones_like(x)
    (dx,) = lib.run(op, [dy, x], {})
    dx = dx.astype(np.float64)
    expect = np.array([1, 0, np.nan, 1, 0, 1, 0, 1, 0, 0.5, 0.5, 0.5])
    np.testing.assert_array_equal(np.isnan(dx), np.isnan(expect))
    fin = ~np.isnan(expect)
    np.testing.assert_allclose(dx[fin], expect[fin], atol=1e-7, rtol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_quickgelu_alpha_limits(lib, dtype):
    x = np.array([np.inf, -np.inf, 5.0, np.nan], dtype)
    dy = np.ones_like(x)
    (neg,) = lib.run("QuickGeluGrad", [dy, x], {"alpha": -1.702})
    np.testing.assert_array_equal(neg[:2], [0.0, 1.0])
    (zero,) = lib.run("QuickGeluGrad", [dy, x], {"alpha": 0.0})
    np.testing.assert_array_equal(zero[:3], [0.5, 0.5, 0.5])
    assert np.isnan(zero[3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_is_a_select(lib, dtype):
    x = np.array([0.0, -0.0, np.nan, -1.0, 2.0, 2.0, np.inf], dtype)
    dy = np.array([np.inf, np.nan, 5.0, np.nan, np.nan, -3.0, 1.0], dtype)
    (dx,) = lib.run("ReluGrad", [dy, x], {})
    np.testing.assert_array_equal(dx[:4], [0, 0, 0, 0])
    assert np.isnan(dx[4]) and dx[5] == -3.0 and dx[6] == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_leaky_y_le_zero_uses_alpha(lib, dtype):
    y = np.array([0.0, -0.0, np.nan, -2.0, 3.0], dtype)
    dy = np.array([2.0, 2.0, 2.0, 2.0, 2.0], dtype)
    (dx,) = lib.run("LeakyReluGrad", [dy, y], {"alpha": 0.5})
    np.testing.assert_array_equal(dx, [1.0, 1.0, 1.0, 1.0, 2.0])


@pytest.mark.parametrize("op", UNARY + ["BiasGeluGrad_dX", "BiasFastGeluGrad_dX"])
def test_thread_count_bitwise(lib, rng, op):
    n = (1 << 19) + 37  # odd size: the thread split lands inside vector blocks
    dy = rng.normal(size=n).astype(np.float32)
    x = (rng.normal(size=n) * 4).astype(np.float32)
    x[::1001] = np.nan
    x[5::999] = np.inf
    ins = [dy, x]
    if op.startswith("Bias"):
        m = (n // 3) * 3
        ins = [dy[:m].reshape(-1, 3), x[:m].reshape(-1, 3), rng.normal(size=3).astype(np.float32)]
    outs = [lib.run(op, ins, {}, threads=t)[0] for t in (1, 2, 3)]
    for o in outs[1:]:
        assert np.array_equal(outs[0].view(np.uint32), o.view(np.uint32)), op


@pytest.mark.parametrize("op", UNARY)
def test_float32_accuracy_dense(lib, op):
    """Dense grid over the interesting range: the vectorised exp/erf keep a few-ulp accuracy."""
    x = np.linspace(-18, 18, 200001).astype(np.float32)
    if op == "SigmoidGrad":
        x = np.linspace(-1, 2, 200001).astype(np.float32)
    dy = np.ones_like(x)
    (dx,) = lib.run(op, [dy, x], {})
    r = ref(op, dy, x, 1.702 if op == "QuickGeluGrad" else (float(np.float32(0.01)) if op == "LeakyReluGrad" else None))
    excess = np.abs(dx - r) - (3e-7 + 2.4e-7 * np.abs(r))  # a few float32 ulp
    assert excess.max() <= 0, (op, float(excess.max()), float(x[excess.argmax()]))


# ---- float16 / bfloat16: computed in float32, rounded once -----------------------------------

HALF = {np.float16: ("float16", 2.0**-11), BF16: ("bfloat16", 2.0**-8)}  # unit roundoff


def check_half(dx, expect, dtype, what):
    """Within the spec's tolerance for the dtype, and no worse than one rounding of a float32 result
    (half an ulp of the 16-bit type plus float32-level error): double rounding or 16-bit arithmetic
    would exceed it."""
    name, u = HALF[dtype]
    assert dx.dtype == np.dtype(dtype), what
    a = dx.astype(np.float64)
    tol = SPEC_TOL[name]
    assert_close(a, expect, tol["atol"], tol["rtol"], f"{what} (spec tolerance)")
    tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal) / 2  # half the spacing of subnormals
    assert_close(a, expect, tiny + 1e-6 * np.abs(expect).max(initial=0), u + 1e-6, f"{what} (one rounding)")


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("shape", [(7,), (3, 5, 11), (3000,)])
def test_half_types_vs_float64(lib, rng, op, dtype, shape):
    dy, x = inputs(rng, op, shape, dtype)
    alpha = {"QuickGeluGrad": 1.702, "LeakyReluGrad": 0.01}.get(op)
    (dx,) = lib.run(op, [dy, x], {})
    a32 = None if alpha is None else float(np.float32(alpha))  # the kernel computes in float32
    check_half(dx, ref(op, dy, x, a32), dtype, f"{op} {np.dtype(dtype).name}")


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("op", ["BiasGeluGrad_dX", "BiasFastGeluGrad_dX"])
@pytest.mark.parametrize("shape", [(5, 33), (700, 3), (4,)])
def test_half_types_bias(lib, rng, op, dtype, shape):
    dy, x = inputs(rng, op, shape, dtype)
    b = rng.normal(0, 2, shape[-1]).astype(dtype)
    (dx,) = lib.run(op, [dy, x, b], {}, threads=2)
    # X + B in float64 from the stored values (the spec's reference); the kernel forms it in float32
    expect = ref(op, dy, x.astype(np.float64), b=b.astype(np.float64))
    check_half(dx, expect, dtype, f"{op} {np.dtype(dtype).name}")


@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_half_types_specials(lib, dtype):
    """Selects and limits survive the widening: NaN stays NaN, ReluGrad at 0/-0/NaN is 0, inf limits."""
    x = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 2.0], dtype)
    dy = np.array([5.0, 5.0, 5.0, 3.0, 3.0, -1.5], dtype)
    (relu,) = lib.run("ReluGrad", [dy, x], {})
    np.testing.assert_array_equal(relu.astype(np.float64), [0, 0, 0, 3, 0, -1.5])
    (gelu,) = lib.run("GeluGrad", [dy, x], {})
    g = gelu.astype(np.float64)
    assert np.isnan(g[2]) and not np.isnan(np.delete(g, 2)).any()
    np.testing.assert_array_equal(g[[0, 1, 3, 4]], [2.5, 2.5, 3.0, 0.0])


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("op", ["GeluGrad", "LeakyReluGrad", "BiasFastGeluGrad_dX"])
def test_half_types_thread_count_bitwise(lib, rng, op, dtype):
    n = (1 << 17) + 37
    dy = rng.normal(size=n).astype(dtype)
    x = (rng.normal(size=n) * 4).astype(dtype)
    x[::1001] = np.nan
    ins = [dy, x]
    if op.startswith("Bias"):
        m = (n // 3) * 3
        ins = [dy[:m].reshape(-1, 3), x[:m].reshape(-1, 3), rng.normal(size=3).astype(dtype)]
    outs = [lib.run(op, ins, {}, threads=t)[0] for t in (1, 2, 3)]
    for o in outs[1:]:
        assert np.array_equal(outs[0].view(np.uint16), o.view(np.uint16)), op


# ---- invalid inputs -------------------------------------------------------------------------

def expect_error(lib, status, fragment, op, ins, attrs=None):
    with pytest.raises(lib.KernelError) as e:
        lib.run(op, ins, attrs or {})
    assert e.value.status_name == status, e.value
    assert fragment in e.value.message, e.value.message
    assert e.value.message.startswith(op + ":")


def test_shape_mismatch(lib):
    a = np.zeros((2, 3), np.float32)
    for op in UNARY:
        expect_error(lib, "OPC_ERR_INVALID_ARGUMENT", "differs", op, [a, np.zeros(3, np.float32)])
        expect_error(lib, "OPC_ERR_INVALID_ARGUMENT", "differs", op, [np.zeros(4000000, np.float32)[:4], a])


def test_dtype_errors(lib):
    a32, a64 = np.zeros(3, np.float32), np.zeros(3, np.float64)
    expect_error(lib, "OPC_ERR_UNSUPPORTED_DTYPE", "share one dtype", "GeluGrad", [a32, a64])
    expect_error(lib, "OPC_ERR_UNSUPPORTED_DTYPE", "share one dtype", "ReluGrad",
                 [a32.astype(np.float16), a32.astype(BF16)])
    expect_error(lib, "OPC_ERR_UNSUPPORTED_DTYPE", "int32", "TanhGrad", [np.zeros(3, np.int32)] * 2)


def test_missing_inputs(lib):
    a = np.zeros(3, np.float32)
    expect_error(lib, "OPC_ERR_INVALID_ARGUMENT", "required input 1 (X) is missing", "ReluGrad", [a, None])
    expect_error(lib, "OPC_ERR_INVALID_ARGUMENT", "required input 2 (B) is missing", "BiasGeluGrad_dX", [a, a])
    expect_error(lib, "OPC_ERR_INVALID_ARGUMENT", "at most 2", "ReluGrad", [a, a, a])


def test_bias_errors(lib):
    x = np.zeros((2, 4), np.float32)
    expect_error(lib, "OPC_ERR_INVALID_ARGUMENT", "B length 3", "BiasGeluGrad_dX", [x, x, np.zeros(3, np.float32)])
    expect_error(lib, "OPC_ERR_INVALID_ARGUMENT", "B must be 1-D", "BiasFastGeluGrad_dX",
                 [x, x, np.zeros((1, 4), np.float32)])
    s = np.zeros((), np.float32)
    expect_error(lib, "OPC_ERR_INVALID_ARGUMENT", "rank >= 1", "BiasGeluGrad_dX", [s, s, np.zeros(1, np.float32)])


def test_attribute_errors(lib):
    a = np.zeros(3, np.float32)
    expect_error(lib, "OPC_ERR_UNKNOWN_ATTRIBUTE", "unknown attribute 'alpha' (accepted: none)", "ReluGrad", [a, a],
                 {"alpha": 1.0})
    expect_error(lib, "OPC_ERR_UNKNOWN_ATTRIBUTE", "unknown attribute 'beta'", "LeakyReluGrad", [a, a], {"beta": 1.0})
    expect_error(lib, "OPC_ERR_INVALID_ATTRIBUTE", "must be of type float", "QuickGeluGrad", [a, a], {"alpha": "x"})


def test_int_alpha_accepted_as_float(lib):
    x = np.array([-1.0, 1.0], np.float32)
    (dx,) = lib.run("LeakyReluGrad", [np.ones_like(x), x], {"alpha": 2})
    np.testing.assert_array_equal(dx, [2.0, 1.0])
