"""DropoutGrad of the C library: the select (a dropped inf or NaN gives 0), the copy when Dropout is the
identity, the schema's defaults, and every malformed input rejected with its status."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from reference.ops.dropout_grad import dropout_grad

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# a kernel in the dtype (16-bit ones through float32) against the float64 formula rounded once
RTOL = {"float32": 2 ** -23, "float64": 2 ** -52, "float16": 2 ** -10, "bfloat16": 2 ** -7}


def _inputs(rng, shape, ratio, dtype):
    dy = rng.normal(0, 2, shape).astype(DTYPES[dtype])
    mask = rng.random(shape) >= ratio
    return dy, mask, np.array(ratio, DTYPES[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_kept_elements_scale_and_dropped_ones_are_zero(lib, rng, dtype):
    dy, mask, ratio = _inputs(rng, (5, 1001), 0.3, dtype)
    dy.reshape(-1)[:6] = [np.inf, -np.inf, np.nan, np.inf, np.nan, -np.inf]
    mask.reshape(-1)[:6] = [False, False, False, True, True, True]
    [dx] = lib.run("DropoutGrad", [dy, mask, ratio, np.array(True)])
    assert dx.dtype == dy.dtype and dx.shape == dy.shape
    got = dx.astype(np.float64)
    assert (got[~mask] == 0).all()  # a select, never 0 * inf
    want = dropout_grad(dy.astype(np.float64), mask, ratio.astype(np.float64), np.array(True))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL[dtype], atol=0)


@pytest.mark.parametrize("ratio, training", [(0.25, False), (0.0, True), (0.5, None)])
def test_identity_cases_copy_dy_bitwise(lib, rng, ratio, training):
    dy, mask, _ = _inputs(rng, (3, 77), 0.5, "float16")  # a mask that drops about half
    dy.reshape(-1)[:2] = [np.nan, np.inf]
    ins = [dy, mask, np.array(ratio, np.float16)] + ([] if training is None else [np.array(training)])
    [dx] = lib.run("DropoutGrad", ins)
    assert dx.tobytes() == dy.tobytes()


def test_absent_ratio_is_one_half(lib, rng):
    dy, mask, _ = _inputs(rng, (64,), 0.5, "float32")
    [dx] = lib.run("DropoutGrad", [dy, mask, None, np.array(True)])
    np.testing.assert_array_equal(dx, np.where(mask, dy * np.float32(2), 0))


def test_any_nonzero_mask_byte_is_kept(lib):
    dy = np.ones(4, np.float32)
    mask = np.array([0, 1, 2, 255], np.uint8).view(np.bool_)
    [dx] = lib.run("DropoutGrad", [dy, mask, np.array(0.5, np.float32), np.array(True)])
    np.testing.assert_array_equal(dx, [0, 2, 2, 2])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_a_ratio_of_shape_1_is_read_as_its_one_value(lib, rng, dtype):
    """ORT's own DropoutGrad tests feed ratio as shape [1]: the same dx as the scalar, bit for bit."""
    dy, mask, ratio = _inputs(rng, (3, 37), 0.3, dtype)
    [scalar] = lib.run("DropoutGrad", [dy, mask, ratio, np.array(True)])
    [one] = lib.run("DropoutGrad", [dy, mask, ratio.reshape(1), np.array(True)])
    np.testing.assert_array_equal(one, scalar)
    assert not np.array_equal(one, dy)  # the ratio was applied, not left at an identity


def test_ratio_may_have_its_own_float_type(lib, rng):
    dy, mask, _ = _inputs(rng, (40,), 0.5, "float32")
    [dx] = lib.run("DropoutGrad", [dy, mask, np.array(0.75, np.float64), np.array(True)])
    np.testing.assert_array_equal(dx, np.where(mask, dy * np.float32(4), 0))


@pytest.mark.parametrize("change, status, words", [
    ({1: np.ones((4, 7), bool)}, "OPC_ERR_INVALID_ARGUMENT", "mask shape [4, 7] differs from dy shape [4, 8]"),
    ({2: np.array(1.0, np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "ratio 1 is outside [0, 1)"),
    ({2: np.array(-0.25, np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "outside [0, 1)"),
    ({2: np.array(np.nan, np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "outside [0, 1)"),
    ({2: np.array([0.5, 0.5], np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "ratio must hold one value (shape [] or [1]), got shape [2]"),
    ({2: np.array([[0.5]], np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "ratio must hold one value (shape [] or [1]), got shape [1, 1]"),
    ({2: np.zeros(0, np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "ratio must hold one value (shape [] or [1]), got shape [0]"),
    ({3: np.array([True, False])}, "OPC_ERR_INVALID_ARGUMENT", "training_mode must be a scalar, got shape [2]"),
    ({1: np.ones((4, 8), np.float32)}, "OPC_ERR_UNSUPPORTED_DTYPE", "mask has dtype float32; it must be bool"),
    ({3: np.array(1.0, np.float32)}, "OPC_ERR_UNSUPPORTED_DTYPE", "training_mode has dtype float32"),
    ({2: np.array(1, np.int64)}, "OPC_ERR_UNSUPPORTED_DTYPE", "ratio has dtype int64"),
    ({0: np.ones((4, 8), np.int32)}, "OPC_ERR_UNSUPPORTED_DTYPE", "dtype int32 is not supported"),
    ({1: None}, "OPC_ERR_INVALID_ARGUMENT", "required input 1 (mask) is missing"),
])
def test_malformed_inputs_are_rejected(lib, change, status, words):
    ins = [np.ones((4, 8), np.float32), np.ones((4, 8), bool), np.array(0.5, np.float32), np.array(True)]
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run("DropoutGrad", ins)
    assert e.value.status_name == status and words in e.value.message, e.value.message


def test_empty_and_scalar(lib):
    [dx] = lib.run("DropoutGrad", [np.ones((3, 0), np.float32), np.ones((3, 0), bool), None, np.array(True)])
    assert dx.shape == (3, 0)
    [dx] = lib.run("DropoutGrad", [np.array(3.0), np.array(True), np.array(0.25), np.array(True)])
    assert dx.shape == () and dx == 4.0
