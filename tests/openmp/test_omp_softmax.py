"""Softmax-family gradients of the C library against float64 NumPy formulas."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from .omp_helpers import assert_close

BF16 = ml_dtypes.bfloat16


def softmax(x, axes):
    m = x.max(axis=axes, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=axes, keepdims=True)


def ref(op, dy, y, axis):
    """float64 reference; legacy ops reduce over all dims from axis on, _13 over the one axis."""
    dy = dy.astype(np.float64)
    y = y.astype(np.float64)
    r = y.ndim
    axis = axis + r if axis < 0 else axis
    axes = tuple(range(axis, r)) if not op.endswith("_13") else (axis,)
    if op.startswith("Log"):
        return dy - np.exp(y) * dy.sum(axis=axes, keepdims=True)
    return y * (dy - (y * dy).sum(axis=axes, keepdims=True))


def make(rng, op, shape, axis, dtype):
    r = len(shape)
    a = axis + r if axis < 0 else axis
    axes = tuple(range(a, r)) if not op.endswith("_13") else (a,)
    x = rng.normal(0, 2, shape)
    y = softmax(x, axes) if x.size else x
    if op.startswith("Log"):
        y = np.log(np.maximum(y, 1e-300))
    return rng.normal(size=shape).astype(dtype), y.astype(dtype)


OPS = ["SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13"]
SHAPES_AXES = [((7,), 0), ((3, 4), 1), ((3, 4), 0), ((3, 4), -1), ((2, 3, 5), 1), ((2, 3, 5), -2),
               ((2, 3, 5), 0), ((2, 1, 4, 3), 2), ((4, 300, 3), 1), ((2, 700), 1), ((5, 3, 260), 1),
               ((3, 17, 2), 0)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
@pytest.mark.parametrize("op", OPS)
def test_values(lib, rng, op, shape, axis, dtype):
    dy, y = make(rng, op, shape, axis, dtype)
    (dx,) = lib.run(op, [dy, y], {"axis": axis})
    d = shape[axis] if op.endswith("_13") else int(np.prod(shape[(axis % len(shape)):]))
    atol = (1e-6 if dtype == np.float32 else 1e-14) * max(1.0, np.sqrt(d))
    assert_close(dx, ref(op, dy, y, axis), atol, 1e-5 if dtype == np.float32 else 1e-12, f"{op} {shape} {axis}")


@pytest.mark.parametrize("op,default", [("SoftmaxGrad", 1), ("SoftmaxGrad_13", -1), ("LogSoftmaxGrad", 1),
                                        ("LogSoftmaxGrad_13", -1)])
def test_default_axis(lib, rng, op, default):
    dy, y = make(rng, op, (3, 4, 5), default, np.float64)
    (dx,) = lib.run(op, [dy, y], {})
    assert_close(dx, ref(op, dy, y, default), 1e-14, 1e-12, op)


def test_legacy_and_13_differ(lib, rng):
    """The two axis conventions give different results on rank 3 (so neither is silently the other)."""
    dy, y = make(rng, "SoftmaxGrad", (2, 3, 4), 1, np.float64)
    (a,) = lib.run("SoftmaxGrad", [dy, y], {"axis": 1})
    (b,) = lib.run("SoftmaxGrad_13", [dy, y], {"axis": 1})
    assert np.abs(a - b).max() > 1e-3


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape,axis", [((4, 64), -1), ((3, 50, 7), 1), ((2, 4096), 1)])
def test_half_types_vs_float64(lib, rng, op, dtype, shape, axis):
    dy, y = make(rng, op, shape, axis, dtype)
    (dx,) = lib.run(op, [dy, y], {"axis": axis})
    assert dx.dtype == np.dtype(dtype)
    expect = ref(op, dy.astype(np.float64), y.astype(np.float64), axis)
    # float32 accumulation: only the final rounding to the 16-bit type is visible
    eps = 2.0**-11 if dtype == np.float16 else 2.0**-8
    err = np.abs(dx.astype(np.float64) - expect)
    assert (err <= eps * np.abs(expect) + 1e-6 * np.abs(expect).max() + 1e-7).all(), float(err.max())


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape,axis", [((0, 4), 0), ((4, 0), 0), ((2, 0, 3), 1), ((2, 3, 0), 1),
                                        ((2, 0, 3), -1), ((0,), 0), ((2, 3, 0, 4), 2)])
def test_empty(lib, op, shape, axis):
    a = np.zeros(shape, np.float32)
    (dx,) = lib.run(op, [a, a], {"axis": axis})
    assert dx.shape == shape


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64])
@pytest.mark.parametrize("shape,axis", [((600, 1031), -1), ((64, 200, 33), 1), ((3, 50000), 0)])
def test_thread_count_bitwise(lib, rng, op, dtype, shape, axis):
    dy, y = make(rng, op, shape, axis, dtype)
    outs = [lib.run(op, [dy, y], {"axis": axis}, threads=t)[0] for t in (1, 2, 3)]
    v = np.uint64 if dtype == np.float64 else (np.uint32 if dtype == np.float32 else np.uint16)
    for o in outs[1:]:
        assert np.array_equal(outs[0].view(v), o.view(v))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape,axis", [((40, 1031), -1), ((6, 300, 33), 1), ((2, 70000), 1), ((2, 300, 260), 1)],
                         ids=["rows", "strided", "row-past-stage", "strided-past-stage"])
def test_float16_is_the_float32_kernel_rounded_once(lib, rng, op, shape, axis):
    """float16 runs as the float32 kernel on the widened inputs, each output rounded once: rows and strided
    blocks staged through float32, and those too long to stage (70000 > 2^16 elements) element by element."""
    dy, y = make(rng, op, shape, axis, np.float16)
    (half,) = lib.run(op, [dy, y], {"axis": axis}, threads=2)
    (single,) = lib.run(op, [dy.astype(np.float32), y.astype(np.float32)], {"axis": axis}, threads=2)
    assert np.array_equal(half.view(np.uint16), single.astype(np.float16).view(np.uint16))


def test_nan_in_dy_poisons_its_row_only(lib):
    dy = np.ones((3, 8), np.float32)
    y = np.full((3, 8), 1 / 8, np.float32)
    dy[1, 2] = np.nan
    (dx,) = lib.run("SoftmaxGrad_13", [dy, y], {})
    assert np.isnan(dx[1]).all() and not np.isnan(dx[[0, 2]]).any()


# ---- invalid inputs ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", OPS)
def test_axis_out_of_range(lib, op):
    a = np.zeros((2, 3, 4), np.float32)
    for axis in (3, -4, 100):
        with pytest.raises(lib.KernelError) as e:
            lib.run(op, [a, a], {"axis": axis})
        assert e.value.status_name == "OPC_ERR_INVALID_ATTRIBUTE"
        assert f"axis {axis} is not in the valid range [-3, 2]" in e.value.message


def test_rank1_legacy_default_axis_invalid(lib):
    a = np.zeros(5, np.float32)
    with pytest.raises(lib.KernelError, match=r"axis 1 is not in the valid range \[-1, 0\]"):
        lib.run("SoftmaxGrad", [a, a], {})
    (dx,) = lib.run("SoftmaxGrad_13", [a, a], {})  # default -1 is fine
    assert dx.shape == (5,)


@pytest.mark.parametrize("op", OPS)
def test_bad_inputs(lib, op):
    a = np.zeros((2, 3), np.float32)
    cases = [
        ([a, np.zeros((2, 4), np.float32)], "OPC_ERR_INVALID_ARGUMENT", "differs"),
        ([a, a.astype(np.float64)], "OPC_ERR_UNSUPPORTED_DTYPE", "share one dtype"),
        ([np.zeros((), np.float32)] * 2, "OPC_ERR_INVALID_ARGUMENT", "rank >= 1"),
        ([a, None], "OPC_ERR_INVALID_ARGUMENT", "is missing"),
        ([a.astype(np.int64)] * 2, "OPC_ERR_UNSUPPORTED_DTYPE", "int64 is not supported"),
    ]
    for ins, status, frag in cases:
        with pytest.raises(lib.KernelError) as e:
            lib.run(op, ins, {})
        assert e.value.status_name == status and frag in e.value.message, e.value.message
    with pytest.raises(lib.KernelError, match="must be of type int"):
        lib.run(op, [a, a], {"axis": 1.0})


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("shape,axis", [((4, 16), -1), ((3, 16, 5), 1), ((600, 8), 1)])
@pytest.mark.parametrize("op", OPS)
def test_sums_beyond_float_range_stay_finite(lib, rng, op, shape, axis, dtype):
    """dY near FLT_MAX: a float sum overflows where the exact result is finite; the kernels redo such
    rows with double sums (float32 and bfloat16 share float's range), bitwise the same at any thread count."""
    dy, y = make(rng, op, shape, axis, np.float64)
    big = np.finfo(np.float32).max * 0.75
    dy[..., ::3] = np.where(rng.random(dy[..., ::3].shape) < 0.5, big, -big)
    dy, y = dy.astype(dtype), y.astype(dtype)
    expected = ref(op, dy, y, axis)
    representable = np.abs(expected) < float(ml_dtypes.finfo(dtype).max)
    (dx,) = lib.run(op, [dy, y], {"axis": axis}, threads=1)
    assert np.isfinite(dx.astype(np.float64)[representable]).all(), f"{op}: a finite result came back inf/NaN"
    scale = np.abs(dy.astype(np.float64)).max()
    np.testing.assert_allclose(dx.astype(np.float64)[representable], expected[representable],
                               rtol=1e-2 if dtype == BF16 else 1e-5, atol=scale * (1e-2 if dtype == BF16 else 1e-6))
    for threads in (2, 3):
        (again,) = lib.run(op, [dy, y], {"axis": axis}, threads=threads)
        assert again.tobytes() == dx.tobytes()
