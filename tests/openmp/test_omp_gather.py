"""GatherGrad and GatherElementsGrad of the C library: against the float64 references with int32 and int64
indices (the spec's cases draw int64 only) and int32 shape values, duplicates summed, every malformed call and
out-of-range index rejected."""
from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from reference.ops.gather_grad import gather_elements_grad, gather_grad

INDEX_TYPES = [np.int64, np.int32]


@pytest.mark.parametrize("idx_type", INDEX_TYPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("x_shape, axis, idx_shape", [((40, 7), 0, (90,)), ((3, 9, 4), 1, (2, 5)), ((5, 6), -1, ()),
                                                      ((6, 8), 1, (30,))])
def test_gather_grad_matches_reference(lib, rng, x_shape, axis, idx_shape, dtype, idx_type):
    dim = x_shape[axis]
    idx = rng.integers(-dim, dim, idx_shape).astype(idx_type)
    a = axis % len(x_shape)
    dy = rng.normal(size=(*x_shape[:a], *idx_shape, *x_shape[a + 1:])).astype(dtype)
    got = lib.run("GatherGrad", [np.array(x_shape, np.int64), idx, dy], {"axis": axis}, threads=2)[0]
    want = gather_grad(np.array(x_shape), idx, dy.astype(np.float64), axis=axis)
    assert got.dtype == dy.dtype and got.shape == x_shape
    # 16-bit: summed in float32, rounded once; float32 sums of a few terms
    tol = {np.float32: 1e-6, np.float64: 1e-14}.get(dtype, 8e-3)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("idx_type", INDEX_TYPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("x_shape, axis, idx_shape", [((6, 7), 0, (15, 7)), ((6, 7), 1, (4, 20)), ((4, 5, 6), 1, (3, 9, 2)),
                                                      ((4, 5, 6), -3, (10, 5, 6)), ((9,), 0, (30,)),
                                                      # dX past the in-cache slab size: zeroed in place, columns split
                                                      ((3000, 30), 0, (3500, 30)), ((2, 3000, 30), 1, (2, 100, 17)),
                                                      # ... in several 1 MiB tile buffers per thread
                                                      ((2000, 300), 0, (2500, 300)),
                                                      # ... an axis too long for a tile buffer: in place
                                                      ((20000, 20), 0, (20000, 20))])
def test_gather_elements_grad_matches_reference(lib, rng, x_shape, axis, idx_shape, dtype, idx_type):
    dim = x_shape[axis]
    idx = rng.integers(-dim, dim, idx_shape).astype(idx_type)
    dy = rng.normal(size=idx_shape).astype(dtype)
    got = lib.run("GatherElementsGrad", [dy, np.array(x_shape, np.int64), idx], {"axis": axis}, threads=2)[0]
    want = gather_elements_grad(dy.astype(np.float64), np.array(x_shape), idx, axis=axis)
    assert got.dtype == dy.dtype and got.shape == x_shape
    tol = {np.float32: 1e-6, np.float64: 1e-14}.get(dtype, 8e-3)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


# GatherGrad's rows, and GatherElementsGrad's slabs and columns (dX past the slab size along axis 0)
STORE_PATH_CASES = [("GatherGrad", (300, 40), 0, (500,)), ("GatherElementsGrad", (300, 40), 1, (300, 60)),
                    ("GatherElementsGrad", (3000, 30), 0, (3500, 30))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("op, x_shape, axis, idx_shape", STORE_PATH_CASES)
def test_streamed_and_cached_stores_agree(lib, rng, op, x_shape, axis, idx_shape, dtype):
    """dX is written with non-temporal stores when it outgrows the last-level cache (opc_stream_bytes): both
    store paths, forced here on small inputs, give the reference's values and the same bits at 1 and 3 threads."""
    idx = rng.integers(-x_shape[axis], x_shape[axis], idx_shape)
    if op == "GatherGrad":
        dy = rng.normal(size=(*idx_shape, *x_shape[1:])).astype(dtype)
        inputs, reference = [np.array(x_shape), idx, dy], gather_grad
    else:
        dy = rng.normal(size=idx_shape).astype(dtype)
        inputs, reference = [dy, np.array(x_shape), idx], gather_elements_grad
    got = {}
    for threshold in (0, 2**62):
        with lib.stream_bytes(threshold):
            assert lib.load().opc_stream_bytes() == threshold
            for threads in (1, 3):
                got[threshold, threads] = lib.run(op, inputs, {"axis": axis}, threads=threads)[0]
    want = reference(*[a.astype(np.float64) if a is dy else a for a in inputs], axis=axis)
    tol = {np.float32: 1e-6, np.float64: 1e-14}.get(dtype, 8e-3)
    np.testing.assert_allclose(got[0, 1].astype(np.float64), want, rtol=tol, atol=tol)
    for key, out in got.items():
        assert out.tobytes() == got[0, 1].tobytes(), key


def test_stream_threshold_defaults_to_the_last_level_cache(lib):
    """The default threshold is the last-level cache's size (sysfs agrees where it tells), and comes back after
    a forced value."""
    default = lib.load().opc_stream_bytes()
    sysfs = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    if sysfs.exists():
        text = sysfs.read_text().strip()
        assert default == int(text.rstrip("KM")) << {"K": 10, "M": 20}.get(text[-1], 0)
    assert default >= 1 << 20
    with lib.stream_bytes(5):
        assert lib.load().opc_stream_bytes() == 5
    assert lib.load().opc_stream_bytes() == default
    assert lib.build_info()["stream_bytes"] == default


def test_duplicates_sum_in_index_order(lib):
    """Three terms into one row: 1e8 + 1 - 1e8 in float32 is 0 in that order, 1 in another."""
    dy = np.array([[1e8], [1.0], [-1e8]], np.float32)
    got = lib.run("GatherGrad", [np.array([2, 1]), np.array([1, 1, -1]), dy], {}, threads=3)[0]
    assert got.ravel().tolist() == [0.0, 0.0]
    got = lib.run("GatherElementsGrad", [dy, np.array([2, 1]), np.array([[1], [1], [-1]])], {}, threads=3)[0]
    assert got.ravel().tolist() == [0.0, 0.0]


def test_int32_shape_values(lib):
    dy = np.ones((3, 2), np.float32)
    got = lib.run("GatherGrad", [np.array([4, 2], np.int32), np.array([0, 3, 3]), dy], {})[0]
    assert got.tolist() == [[1, 1], [0, 0], [0, 0], [2, 2]]


@pytest.mark.parametrize("idx_type", INDEX_TYPES)
@pytest.mark.parametrize("bad", [5, -6, 2**31 - 1, -(2**31)])
def test_out_of_range_indices_rejected(lib, bad, idx_type):
    idx = np.array([0, 4, bad, -5], dtype=idx_type)
    with pytest.raises(lib.KernelError, match=rf"indices holds {bad} at position 2, outside \[-5, 4\]"):
        lib.run("GatherGrad", [np.array([5, 3]), idx, np.ones((4, 3), np.float32)], {}, threads=2)
    with pytest.raises(lib.KernelError, match=rf"indices holds {bad} at position 2, outside \[-5, 4\]"):
        lib.run("GatherElementsGrad", [np.ones((4, 1), np.float32), np.array([5, 3]), idx.reshape(4, 1)], {}, threads=2)


@pytest.mark.parametrize("x_shape", [(3000, 30), (20000, 20)])  # column mode: via a tile buffer, in place
def test_out_of_range_index_rejected_in_column_mode(lib, x_shape):
    idx = np.zeros(x_shape, np.int64)
    idx[1234, 5] = x_shape[0]
    with pytest.raises(lib.KernelError, match=rf"indices holds {x_shape[0]} at position {1234 * x_shape[1] + 5}, outside"):
        lib.run("GatherElementsGrad", [np.ones(x_shape, np.float32), np.array(x_shape), idx], {}, threads=2)


def test_any_index_into_an_empty_axis_is_rejected(lib):
    with pytest.raises(lib.KernelError, match=r"indices holds 0 at position 0, outside \[0, -1\]"):
        lib.run("GatherGrad", [np.array([0, 3]), np.array([0]), np.ones((1, 3))], {})
    assert lib.run("GatherGrad", [np.array([0, 3]), np.zeros(0, np.int64), np.ones((0, 3))], {})[0].shape == (0, 3)


def _gg(shape, idx_shape, dy_shape):
    return [np.array(shape, np.int64), np.zeros(idx_shape, np.int64), np.zeros(dy_shape, np.float32)]


def _geg(dy_shape, shape, idx_shape):
    return [np.zeros(dy_shape, np.float32), np.array(shape, np.int64), np.zeros(idx_shape, np.int64)]


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("GatherGrad", _gg([5, 4], (4,), (4, 3)), {}, "Gather of shape \\[5, 4\\] by indices \\[4\\] at axis 0"),
    ("GatherGrad", _gg([5, 3, 1], (4,), (4, 3)), {}, "dY has shape \\[4, 3\\]"),
    ("GatherGrad", _gg([5, -3], (4,), (4, 3)), {}, "negative dim"),
    ("GatherGrad", _gg([5, 3], (4,), (4, 3)), {"axis": 2}, "axis 2 is not in the valid range \\[-2, 1\\]"),
    ("GatherGrad", _gg(np.zeros(0, np.int64), (4,), (4,)), {}, "shape holds 0 dims"),
    ("GatherElementsGrad", _geg((4, 3), [5, 3], (4, 4)), {}, "dY shape \\[4, 3\\] differs from indices shape \\[4, 4\\]"),
    ("GatherElementsGrad", _geg((4, 4), [5, 3], (4, 4)), {}, "indices dim 1 is 4, larger than the forward input's 3"),
    ("GatherElementsGrad", _geg((12,), [5, 3], (12,)), {}, "indices has rank 1; the forward input .* has rank 2"),
    ("GatherElementsGrad", _geg((4, 3), [5, 3], (4, 3)), {"axis": -3}, "axis -3 is not in the valid range"),
])
def test_malformed_calls_rejected(lib, op, inputs, attrs, message):
    with pytest.raises(lib.KernelError, match=message):
        lib.run(op, inputs, attrs)


def test_shape_must_be_1d_int(lib):
    dy = np.ones((2, 3), np.float32)
    with pytest.raises(lib.KernelError, match=r"shape must be 1-D"):
        lib.run("GatherGrad", [np.array([[5, 3]]), np.array([0, 1]), dy], {})
    with pytest.raises(lib.KernelError, match=r"shape has dtype float"):
        lib.run("GatherGrad", [np.array([5.0, 3.0], np.float32), np.array([0, 1]), dy], {})
