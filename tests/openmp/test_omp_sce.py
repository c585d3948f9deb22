"""SoftmaxCrossEntropyLossGrad of the C library: every label checked before it is read through (a huge or
negative one fails with its status, never an out-of-bounds read), int32 and int64 labels alike, ignored rows
selected, 16-bit types as float32 rounded once, and malformed shapes and attributes rejected."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from reference.ops.softmax_cross_entropy_loss_grad import softmax_cross_entropy_loss_grad as reference

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# s * (p - onehot) in the dtype (16-bit ones through float32): a few roundings of the result's size; float64 also
# carries mean's W, a sum of 1800 terms in element order where the reference sums pairwise (float32 sums in double)
RTOL = {"float32": 4 * 2 ** -23, "float64": 1800 * 2 ** -52, "float16": 2 ** -10, "bfloat16": 2 ** -7}


def _inputs(rng, shape, dtype, label_type=np.int64):
    x = rng.normal(0, 3, shape)
    log_prob = (x - np.log(np.exp(x).sum(axis=1, keepdims=True))).astype(DTYPES[dtype])
    label = rng.integers(0, shape[1], (shape[0], *shape[2:])).astype(label_type)
    weight = rng.uniform(0.2, 2.0, shape[1]).astype(DTYPES[dtype])
    return log_prob, label, weight


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 1030), (3, 5, 600)])
def test_matches_the_reference(lib, rng, dtype, shape):
    log_prob, label, weight = _inputs(rng, shape, dtype)
    label.reshape(-1)[::5] = -100
    dy = rng.normal(0, 2, label.shape).astype(DTYPES[dtype])
    dy.reshape(-1)[:2] = [np.nan, np.inf]
    label.reshape(-1)[0] = -100  # NaN dY on an ignored element: its row stays exactly 0
    for reduction in ("none", "mean"):
        d_y = dy if reduction == "none" else np.array(1.5, DTYPES[dtype])
        attrs = {"reduction": reduction, "ignore_index": -100}
        [got] = lib.run("SoftmaxCrossEntropyLossGrad", [d_y, log_prob, label, weight], attrs)
        assert got.dtype == log_prob.dtype and got.shape == log_prob.shape
        want = reference(d_y.astype(np.float64), log_prob.astype(np.float64), label, weight.astype(np.float64), **attrs)
        got = got.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert (np.moveaxis(got, 1, -1).reshape(-1, shape[1])[0] == 0).all()  # element 0's row
        finite = np.isfinite(want)
        np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
        np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL[dtype], atol=RTOL[dtype] * np.abs(want[finite]).max())


def test_int32_and_int64_labels_agree_bitwise(lib, rng):
    log_prob, label, weight = _inputs(rng, (64, 33), "float32")
    dy = np.array(0.75, np.float32)
    [a] = lib.run("SoftmaxCrossEntropyLossGrad", [dy, log_prob, label, weight], {"reduction": "sum"})
    [b] = lib.run("SoftmaxCrossEntropyLossGrad", [dy, log_prob, label.astype(np.int32), weight], {"reduction": "sum"})
    assert a.tobytes() == b.tobytes()


def test_every_label_ignored_gives_zeros_for_mean(lib, rng):
    log_prob, label, _ = _inputs(rng, (6, 5), "float32")
    label[:] = 3
    [got] = lib.run("SoftmaxCrossEntropyLossGrad", [np.array(1.0, np.float32), log_prob, label], {"ignore_index": 3})
    assert (got == 0).all()


@pytest.mark.parametrize("label_type", [np.int32, np.int64])
@pytest.mark.parametrize("bad", [5, -1, -100, 2 ** 31 - 1])
def test_labels_outside_the_classes_are_rejected(lib, rng, label_type, bad):
    log_prob, label, weight = _inputs(rng, (4, 5), "float32", label_type)
    label[2] = bad
    with pytest.raises(lib.KernelError) as e:
        lib.run("SoftmaxCrossEntropyLossGrad", [np.array(1.0, np.float32), log_prob, label, weight],
                {"ignore_index": -7})
    assert e.value.status_name == "OPC_ERR_INVALID_ARGUMENT" and f"label {bad} at element 2" in e.value.message


def test_a_huge_int64_label_is_rejected(lib, rng):
    log_prob, label, weight = _inputs(rng, (4, 5), "float32")
    label[1] = 1 << 40
    with pytest.raises(lib.KernelError) as e:
        lib.run("SoftmaxCrossEntropyLossGrad", [np.array(1.0, np.float32), log_prob, label, weight])
    assert "no ignore_index given" in e.value.message


@pytest.mark.parametrize("change, status, words", [
    ("weight_short", "OPC_ERR_INVALID_ARGUMENT", "weight shape [4]"),
    ("label_shape", "OPC_ERR_INVALID_ARGUMENT", "label shape [3]"),
    ("dy_not_scalar", "OPC_ERR_INVALID_ARGUMENT", "dY shape [4]"),
    ("log_prob_rank1", "OPC_ERR_INVALID_ARGUMENT", "rank >= 2"),
    ("reduction", "OPC_ERR_INVALID_ATTRIBUTE", "reduction 'batchmean'"),
    ("label_float", "OPC_ERR_UNSUPPORTED_DTYPE", "label has dtype float32"),
    ("weight_float64", "OPC_ERR_UNSUPPORTED_DTYPE", "input weight has dtype float64"),
])
def test_malformed_inputs_are_rejected(lib, rng, change, status, words):
    log_prob, label, weight = _inputs(rng, (4, 5), "float32")
    dy, attrs = np.array(1.0, np.float32), {}
    if change == "weight_short":
        weight = weight[:4]
    elif change == "label_shape":
        label = label[:3]
    elif change == "dy_not_scalar":
        dy = np.ones(4, np.float32)
    elif change == "log_prob_rank1":
        log_prob, label = log_prob[0], label[0]
    elif change == "reduction":
        attrs = {"reduction": "batchmean"}
    elif change == "label_float":
        label = label.astype(np.float32)
    elif change == "weight_float64":
        weight = weight.astype(np.float64)
    with pytest.raises(lib.KernelError) as e:
        lib.run("SoftmaxCrossEntropyLossGrad", [dy, log_prob, label, weight], attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message


def test_empty_inputs(lib):
    f32 = np.float32
    [got] = lib.run("SoftmaxCrossEntropyLossGrad", [np.array(1.0, f32), np.zeros((0, 5), f32), np.zeros(0, np.int64)])
    assert got.shape == (0, 5)
    # no classes: only ignored labels are valid
    ignored = np.full(3, -100)
    [got] = lib.run("SoftmaxCrossEntropyLossGrad", [np.array(1.0, f32), np.zeros((3, 0), f32), ignored],
                    {"ignore_index": -100})
    assert got.shape == (3, 0)
    with pytest.raises(lib.KernelError) as e:
        lib.run("SoftmaxCrossEntropyLossGrad", [np.array(1.0, f32), np.zeros((3, 0), f32), np.zeros(3, np.int64)])
    assert "label 0 at element 0 is outside [0, 0)" in e.value.message
