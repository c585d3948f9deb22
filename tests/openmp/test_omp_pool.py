"""MaxPoolGrad and AveragePoolGrad of the C library: against the float64 references, and every malformed
call rejected before anything is written."""
from __future__ import annotations

import numpy as np
import pytest

from reference.forward.pool import max_pool
from reference.ops.pool_grad import average_pool_grad, max_pool_grad


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_grad_matches_reference(lib, rng, dtype):
    x = rng.normal(size=(2, 3, 11, 10))
    _, indices = max_pool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    dy = rng.normal(size=indices.shape).astype(dtype)
    got = lib.run("MaxPoolGrad", [dy, indices], {"dX_shape": list(x.shape)})[0]
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got, max_pool_grad(dy, indices, dX_shape=x.shape), rtol=1e-6, atol=1e-6)


def test_max_pool_grad_indices_in_other_planes(lib, rng):
    """Valid indices outside their own plane (not what MaxPool makes) take the ordered serial path."""
    dy = rng.normal(size=(2, 3, 2, 2))
    indices = rng.integers(0, 2 * 3 * 4 * 4, dy.shape)
    got = lib.run("MaxPoolGrad", [dy, indices], {"dX_shape": [2, 3, 4, 4]}, threads=2)[0]
    np.testing.assert_allclose(got, max_pool_grad(dy, indices, dX_shape=(2, 3, 4, 4)), rtol=1e-12)


@pytest.mark.parametrize("dy_shape", [(2, 3, 0, 2), (2, 3, 1, 1)])
def test_max_pool_grad_with_few_or_no_dy_entries(lib, dy_shape):
    """A dY plane emptier than dX's (no entries, or one for the whole plane): the per-plane work split
    still leaves dX zero but for the named elements, at any thread count."""
    dy = np.full(dy_shape, 2.0, np.float32)
    plane = np.arange(2 * 3).reshape(2, 3, 1, 1) * 16
    indices = np.broadcast_to(plane + 5, dy_shape).copy()
    for threads in (1, 2):
        got = lib.run("MaxPoolGrad", [dy, indices], {"dX_shape": [2, 3, 4, 4]}, threads=threads)[0]
        np.testing.assert_array_equal(got, max_pool_grad(dy, indices, dX_shape=(2, 3, 4, 4)))


@pytest.mark.parametrize("bad", [16, -1, 2**62, -(2**63)])
def test_max_pool_grad_rejects_out_of_range_indices(lib, bad):
    indices = np.array([0, 5, bad, 7], dtype=np.int64).reshape(1, 1, 2, 2)
    with pytest.raises(lib.KernelError, match=rf"Indices holds {bad}, outside \[0, 16\)"):
        lib.run("MaxPoolGrad", [np.ones((1, 1, 2, 2), np.float32), indices], {"dX_shape": [1, 1, 4, 4]}, threads=2)


@pytest.mark.parametrize("attrs, inputs, message", [
    ({}, ((1, 2, 2, 2), (1, 2, 2, 2)), "dX_shape is required"),
    ({"dX_shape": [1, 3, 4, 4]}, ((1, 2, 2, 2), (1, 2, 2, 2)), "batch and channels"),
    ({"dX_shape": [1, 2, 4, 4]}, ((1, 2, 2, 2), (1, 2, 2, 1)), "differs from dY shape"),
    ({"dX_shape": [8, 8]}, ((8, 8), (8, 8)), "rank 3 to 5"),
])
def test_max_pool_grad_rejects_malformed_calls(lib, attrs, inputs, message):
    dy, idx = np.zeros(inputs[0], np.float32), np.zeros(inputs[1], np.int64)
    with pytest.raises(lib.KernelError, match=message):
        lib.run("MaxPoolGrad", [dy, idx], attrs)


@pytest.mark.parametrize("x_shape, attrs", [
    ((2, 3, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 7, 8), {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1}),
    ((2, 2, 13), {"kernel_shape": [4], "strides": [3], "pads": [2, 1]}),
    ((1, 2, 4, 6, 5), {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [0, 1, 1, 1, 0, 0]}),
    # 2-wide stride-2 rows (written once by the first window row): rows no window covers, an end pad,
    # window rows that overlap (later ones add)
    ((1, 2, 9, 9), {"kernel_shape": [2, 2], "strides": [3, 2], "pads": [0, 0, 0, 1]}),
    ((2, 1, 6, 7), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 1, 0], "count_include_pad": 1}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_average_pool_grad_matches_reference(lib, rng, x_shape, attrs, dtype):
    from reference.forward.pool import output_shape

    full = {"strides": None, "auto_pad": "NOTSET", "pads": None, "count_include_pad": 0, "ceil_mode": 0, **attrs}
    dy = rng.normal(size=output_shape(x_shape, **{k: full[k] for k in ("kernel_shape", "strides", "pads",
                                                                         "ceil_mode", "auto_pad")})).astype(dtype)
    got = lib.run("AveragePoolGrad", [dy], {**attrs, "dX_shape": list(x_shape)}, threads=2)[0]
    want = average_pool_grad(dy, dX_shape=x_shape, **full)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == np.float32 else 1e-13, atol=1e-6)


@pytest.mark.parametrize("attrs, dy_shape, message", [
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, (1, 2, 5, 5), "not the AveragePool output"),
    ({"kernel_shape": [2, 2, 2]}, (1, 2, 7, 7), "kernel_shape has the wrong length"),
    ({"strides": [2, 2]}, (1, 2, 4, 4), "kernel_shape is missing"),
    ({"kernel_shape": [2, 2], "pads": [2, 2, 2, 2]}, (1, 2, 11, 11), "smaller than the kernel"),
    ({"kernel_shape": [2, 2], "strides": [0, 0]}, (1, 2, 4, 4), "strides entry 0 is 0"),
    ({"kernel_shape": [2, 2], "auto_pad": "SAME"}, (1, 2, 8, 8), "auto_pad 'SAME'"),
    ({"kernel_shape": [2, 2], "auto_pad": "VALID", "pads": [1, 0, 0, 0]}, (1, 2, 8, 8), "combined"),
    ({"kernel_shape": [2, 2], "count_include_pad": 2}, (1, 2, 7, 7), "must be 0 or 1"),
])
def test_average_pool_grad_rejects_malformed_calls(lib, attrs, dy_shape, message):
    with pytest.raises(lib.KernelError, match=message):
        lib.run("AveragePoolGrad", [np.zeros(dy_shape, np.float32)], {**attrs, "dX_shape": [1, 2, 8, 8]})


@pytest.mark.parametrize("op", ["MaxPoolGrad", "AveragePoolGrad"])
def test_large_dx_streams_out_the_same_values(lib, rng, op):
    """dX of 8 MiB and more leaves through non-temporal stores from a plane or row built in cache."""
    x_shape, geometry = (2, 16, 256, 256), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    y, indices = max_pool(rng.normal(size=x_shape), **geometry)
    dy = rng.normal(size=y.shape).astype(np.float32)
    if op == "MaxPoolGrad":
        ins, attrs, want = [dy, indices], {"dX_shape": list(x_shape)}, max_pool_grad(dy, indices, dX_shape=x_shape)
    else:
        ins, attrs = [dy], {**geometry, "dX_shape": list(x_shape)}
        want = average_pool_grad(dy, dX_shape=x_shape, auto_pad="NOTSET", count_include_pad=0, ceil_mode=0, **geometry)
    one, two = (lib.run(op, ins, attrs, threads=t)[0] for t in (1, 2))
    assert one.tobytes() == two.tobytes()
    np.testing.assert_allclose(one, want, rtol=1e-5, atol=1e-6)
