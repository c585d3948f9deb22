"""GatherNDGrad, SliceGrad, DivGrad and ReduceSumTraining of the C library (csrc/plumbing_grads.c): results against
independent NumPy formulas (np.add.at, slice assignment, np.sum; not the reference modules), the same bits at 1 to 4
threads with shapes that cross the work splits (duplicate tuples summed in a fixed order, reductions in fixed blocks),
and every malformed input rejected with its status and message."""
from __future__ import annotations

import numpy as np
import pytest

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
TOL = {"float32": 1e-6, "float64": 1e-13, "float16": 2e-3}
I64 = np.int64


def _same_bits(lib, op, ins, attrs=None):
    outs = [lib.run(op, ins, attrs or {}, threads=t) for t in (1, 2, 3, 4)]
    for o in outs[1:]:
        for a, b in zip(o, outs[0]):
            assert a.tobytes() == b.tobytes(), op


# ---- GatherNDGrad ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_gathernd_grad_sums_duplicates(lib, rng, dtype):
    dims, k = (7, 5, 3), 2
    idx = rng.integers(-5, 5, (40, k)).astype(I64)
    idx[:, 0] = rng.integers(-7, 7, 40)
    up = rng.normal(size=(40, 3)).astype(DTYPES[dtype])
    [out] = lib.run("GatherNDGrad", [np.array(dims, I64), idx, up])
    want = np.zeros(dims)
    np.add.at(want, (idx[:, 0] % 7, idx[:, 1] % 5), up.astype(np.float64))
    assert out.dtype == up.dtype and out.shape == dims
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=TOL[dtype], atol=TOL[dtype])


def test_gathernd_grad_batch_dims(lib, rng):
    idx = rng.integers(0, 3, (2, 4, 1)).astype(I64)
    up = rng.normal(size=(2, 4, 5))
    [out] = lib.run("GatherNDGrad", [np.array([2, 3, 5], I64), idx, up], {"batch_dims": 1})
    want = np.zeros((2, 3, 5))
    for n in range(2):
        np.add.at(want[n], idx[n, :, 0], up[n])
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-13)


def test_gathernd_grad_threads(lib, rng):
    idx = rng.integers(-3000, 3000, (20000, 1)).astype(I64)
    idx[::3] = 17  # a hot row
    up = rng.normal(size=(20000, 24)).astype(np.float32)
    _same_bits(lib, "GatherNDGrad", [np.array([3000, 24], I64), idx, up])
    _same_bits(lib, "GatherNDGrad", [np.array([3000, 24], I64), idx, up.astype(np.float16)])


@pytest.mark.parametrize("ins, attrs, status, words", [
    ([np.array([3, 4], I64), np.array([[0, 4]], I64), np.ones(1, np.float32)], {}, "OPC_ERR_INVALID_ARGUMENT", "indices holds 4"),
    ([np.array([3, 4], I64), np.array([[-4, 0]], I64), np.ones(1, np.float32)], {}, "OPC_ERR_INVALID_ARGUMENT", "indices holds -4"),
    ([np.array([3, 4], I64), np.array([[0, 1, 0]], I64), np.ones(1, np.float32)], {}, "OPC_ERR_INVALID_ARGUMENT", "last dim 3"),
    ([np.array([3, 4], I64), np.array([[0], [1]], I64), np.ones(8, np.float32)], {}, "OPC_ERR_INVALID_ARGUMENT", "update has shape [8]"),
    ([np.array([2, 4], I64), np.array([[0], [1], [1]], I64), np.ones(3, np.float32)], {"batch_dims": 1},
     "OPC_ERR_INVALID_ARGUMENT", "batch dims"),
    ([np.array([3, 3], I64), np.array([[0], [1], [2]], I64), np.ones(3, np.float32)], {"batch_dims": 2},
     "OPC_ERR_INVALID_ATTRIBUTE", "batch_dims 2"),
    ([np.array([3, -4], I64), np.array([[0]], I64), np.ones((1, 0), np.float32)], {}, "OPC_ERR_INVALID_ARGUMENT", "negative dim"),
    ([np.array([3, 4], I64), np.array([[0]], np.int32), np.ones((1, 4), np.float32)], {}, "OPC_ERR_UNSUPPORTED_DTYPE", "int32"),
    ([np.array([[3, 4]], I64), np.array([[0]], I64), np.ones((1, 4), np.float32)], {}, "OPC_ERR_INVALID_ARGUMENT", "1-D"),
])
def test_gathernd_grad_rejects(lib, ins, attrs, status, words):
    with pytest.raises(lib.KernelError) as e:
        lib.run("GatherNDGrad", ins, attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message


# ---- SliceGrad ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("starts, ends, axes, steps, index", [
    ([1], [3], [2], [1], np.s_[:, :, 1:3]),
    ([-1], [-2 ** 53], [1], [-1], np.s_[:, ::-1]),
    ([5, 100], [0, -100], [2, 0], [-2, -3], np.s_[::-3, :, 5:0:-2]),
    ([0, 1], [2 ** 53, 2 ** 53], [1, 0], [2, 1], np.s_[1:, ::2]),
    ([3], [1], [1], [1], np.s_[:, 3:1]),
])
def test_slice_grad_writes_dy_back(lib, rng, dtype, starts, ends, axes, steps, index):
    dims = (7, 5, 6)
    zeros = np.zeros(dims)
    dy = rng.normal(size=zeros[index].shape).astype(DTYPES[dtype])
    ins = [dy, np.array(dims, I64)] + [np.array(v, I64) for v in (starts, ends, axes, steps)]
    [dx] = lib.run("SliceGrad", ins)
    zeros[index] = dy
    assert dx.dtype == dy.dtype
    np.testing.assert_array_equal(dx, zeros.astype(dy.dtype))


def test_slice_grad_defaults_and_int32(lib, rng):
    dy = rng.normal(size=(2, 2, 2)).astype(np.float32)
    [dx] = lib.run("SliceGrad", [dy, np.array([4, 3, 2], I64), np.array([1, 0], np.int32), np.array([3, 2], np.int32)])
    want = np.zeros((4, 3, 2), np.float32)
    want[1:3, 0:2] = dy
    np.testing.assert_array_equal(dx, want)


def test_slice_grad_threads(lib, rng):
    dy = rng.normal(size=(29, 17, 32)).astype(np.float32)
    ins = [dy, np.array([40, 33, 96], I64), np.array([32, -1, 1], I64), np.array([64, -2 ** 53, 30], I64),
           np.array([2, 1, 0], I64), np.array([1, -2, 1], I64)]
    _same_bits(lib, "SliceGrad", ins)


def _sg(dy_shape, starts, ends, axes=None, steps=None, shape=(2, 5), t=I64):
    ins = [np.ones(dy_shape, np.float32), np.array(shape, I64), np.array(starts, t), np.array(ends, t)]
    ins += [None if axes is None else np.array(axes, t), None if steps is None else np.array(steps, t)]
    return ins


@pytest.mark.parametrize("ins, status, words", [
    (_sg((2, 3), [0], [3], [1], [0]), "OPC_ERR_INVALID_ARGUMENT", "steps holds 0"),
    (_sg((2, 3), [0], [3], [2], [1]), "OPC_ERR_INVALID_ARGUMENT", "axes holds 2"),
    (_sg((2, 3), [0, 1], [3, 4], [1, -1], None), "OPC_ERR_INVALID_ARGUMENT", "twice"),
    (_sg((2, 2), [0], [3], [1], [1]), "OPC_ERR_INVALID_ARGUMENT", "dY has shape [2, 2]"),
    (_sg((2, 9), [0], [3], [1], [1]), "OPC_ERR_INVALID_ARGUMENT", "dY has shape [2, 9]"),
    (_sg((2, 3), [0, 0], [3], [1], [1]), "OPC_ERR_INVALID_ARGUMENT", "ends has shape [1]"),
    (_sg((2, 3), [0], [3], [1], [1], shape=(2, -5)), "OPC_ERR_INVALID_ARGUMENT", "negative dim"),
    (_sg((2, 3), [0, 0, 0], [3, 3, 3]), "OPC_ERR_INVALID_ARGUMENT", "3 starts for X of rank 2"),
    (_sg((2, 3), [0], [3], [1], [1])[:2] + [np.array([0], np.float32), np.array([3], I64)], "OPC_ERR_UNSUPPORTED_DTYPE",
     "starts has dtype float32"),
])
def test_slice_grad_rejects(lib, ins, status, words):
    while ins and ins[-1] is None:
        ins = ins[:-1]
    with pytest.raises(lib.KernelError) as e:
        lib.run("SliceGrad", ins)
    assert e.value.status_name == status and words in e.value.message, e.value.message


# ---- DivGrad --------------------------------------------------------------------------------------------------

def _unbroadcast(g, shape):
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    return g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape, b_shape", [((3, 4), (3, 4)), ((2, 3, 4), ()), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)),
                                              ((), (2, 3)), ((4, 1, 3), (1, 5, 1))])
def test_div_grad_unbroadcast(lib, rng, dtype, a_shape, b_shape):
    t = DTYPES[dtype]
    a = rng.normal(size=a_shape).astype(t)
    b = (rng.uniform(0.5, 2, size=b_shape) * rng.choice([-1, 1], size=b_shape)).astype(t)
    y_shape = np.broadcast_shapes(a_shape, b_shape)
    dy = rng.normal(size=y_shape).astype(t)
    da, db = lib.run("DivGrad", [dy, a, b])
    A, B, G = (v.astype(np.float64) for v in (a, b, dy))
    assert da.shape == a_shape and db.shape == b_shape and da.dtype == t
    np.testing.assert_allclose(da.astype(np.float64), _unbroadcast(G / B, a_shape), rtol=TOL[dtype], atol=TOL[dtype])
    np.testing.assert_allclose(db.astype(np.float64), _unbroadcast(-G * A / (B * B), b_shape), rtol=TOL[dtype],
                               atol=TOL[dtype] * 10)


def test_div_grad_one_output_and_threads(lib, rng):
    a = rng.normal(size=(4, 33, 130)).astype(np.float32)
    for b_shape in [(), (130,), (4, 1, 130)]:
        b = rng.uniform(0.5, 2, size=b_shape).astype(np.float32)
        dy = rng.normal(size=a.shape).astype(np.float32)
        _same_bits(lib, "DivGrad", [dy, a, b])
    both = lib.run("DivGrad", [dy, a, b])
    none_a, only_b = lib.run("DivGrad", [dy, a, b], want_outputs=[False, True])
    only_a, none_b = lib.run("DivGrad", [dy, a, b], want_outputs=[True, False])
    assert none_a is None and none_b is None
    assert only_b.tobytes() == both[1].tobytes() and only_a.tobytes() == both[0].tobytes()


@pytest.mark.parametrize("shapes, status, words", [
    (((2, 3), (4,), (2, 3)), "OPC_ERR_INVALID_ARGUMENT", "do not broadcast"),
    (((2, 3), (3,), (2, 4)), "OPC_ERR_INVALID_ARGUMENT", "dY has shape [2, 4]"),
    (((2, 3), (3,), (3,)), "OPC_ERR_INVALID_ARGUMENT", "dY has shape [3]"),
])
def test_div_grad_rejects(lib, shapes, status, words):
    a, b, dy = (np.ones(s, np.float32) for s in shapes)
    with pytest.raises(lib.KernelError) as e:
        lib.run("DivGrad", [dy, a, b])
    assert e.value.status_name == status and words in e.value.message, e.value.message


def test_div_grad_mixed_dtypes_rejected(lib):
    with pytest.raises(lib.KernelError) as e:
        lib.run("DivGrad", [np.ones(3, np.float32), np.ones(3, np.float64), np.ones(3, np.float32)])
    assert e.value.status_name == "OPC_ERR_UNSUPPORTED_DTYPE", e.value.message


# ---- ReduceSumTraining ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axes, keepdims, noop", [
    ((2, 3, 4), [1], 1, 0), ((2, 3, 4), [0, 1], 0, 0), ((2, 3, 4), [-1, 0], 0, 0), ((2, 3), [], 1, 0),
    ((2, 3), [], 0, 1), ((2, 0), [1], 0, 0), ((4096, 8), [0], 0, 0), ((8, 4096), [1], 1, 0), ((2, 3, 4, 5), [0, 3], 1, 0),
])
def test_reduce_sum_training_sums(lib, rng, dtype, shape, axes, keepdims, noop):
    x = rng.normal(size=shape).astype(DTYPES[dtype])
    [y] = lib.run("ReduceSumTraining", [x, np.array(axes, I64)], {"keepdims": keepdims, "noop_with_empty_axes": noop})
    if not axes and noop:
        want = x.astype(np.float64)
    else:
        ax = tuple(a % len(shape) for a in axes) if axes else tuple(range(len(shape)))
        want = x.astype(np.float64).sum(axis=ax, keepdims=bool(keepdims))
    assert y.shape == want.shape and y.dtype == x.dtype
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=TOL[dtype], atol=TOL[dtype] * 4)


def test_reduce_sum_training_threads(lib, rng):
    x = rng.normal(size=(4, 33, 130)).astype(np.float32)
    for axes in ([0, 1], [2], [0, 1, 2], [1]):
        _same_bits(lib, "ReduceSumTraining", [x, np.array(axes, I64)], {"keepdims": 0})
    _same_bits(lib, "ReduceSumTraining", [rng.normal(size=(7, 30000)), np.array([0, 1], I64)])
    _same_bits(lib, "ReduceSumTraining", [rng.normal(size=(4, 33, 1300)).astype(np.float32), np.array([0, 1], I64)])


@pytest.mark.parametrize("axes, attrs, status, words", [
    (np.array([3], I64), {}, "OPC_ERR_INVALID_ARGUMENT", "axes holds 3"),
    (np.array([-4], I64), {}, "OPC_ERR_INVALID_ARGUMENT", "axes holds -4"),
    (np.array([1, -2], I64), {}, "OPC_ERR_INVALID_ARGUMENT", "twice"),
    (np.array([[1]], I64), {}, "OPC_ERR_INVALID_ARGUMENT", "1-D"),
    (np.array([1], np.int32), {}, "OPC_ERR_UNSUPPORTED_DTYPE", "int32"),
    (np.array([1], I64), {"keepdims": 2}, "OPC_ERR_INVALID_ATTRIBUTE", "keepdims 2"),
    (None, {}, "OPC_ERR_INVALID_ARGUMENT", "missing"),
])
def test_reduce_sum_training_rejects(lib, axes, attrs, status, words):
    with pytest.raises(lib.KernelError) as e:
        lib.run("ReduceSumTraining", [np.ones((2, 3, 4), np.float32), axes], attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message
