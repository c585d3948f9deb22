"""ORT's legacy losses in the C library (csrc/sce_legacy.c): SoftmaxCrossEntropy, SparseSoftmaxCrossEntropy and
their gradients against the float64 references, bitwise the same at 1-4 threads (forced splits included), stable
for huge logits, every sparse label checked before it is read through (a huge or negative one fails with its
status, never an out-of-bounds read), and malformed shapes, dtypes and attributes rejected."""
from __future__ import annotations

import numpy as np
import pytest

from reference.ops.softmax_cross_entropy import softmax_cross_entropy
from reference.ops.softmax_cross_entropy_grad import softmax_cross_entropy_grad
from reference.ops.sparse_softmax_cross_entropy import sparse_softmax_cross_entropy
from reference.ops.sparse_softmax_cross_entropy_grad import sparse_softmax_cross_entropy_grad

DTYPES = {"float32": np.float32, "float64": np.float64}
# a row's log-sum-exp and 16-lane sums in the dtype: a few roundings times the row length's square root
RTOL = {"float32": 64 * 2 ** -23, "float64": 64 * 2 ** -52}


def _close(got, want, dtype, scale=None):
    got = np.asarray(got, np.float64)
    assert got.shape == np.shape(want)
    atol = RTOL[dtype] * (np.abs(want).max() if scale is None else scale) if np.size(want) else 0
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=atol, equal_nan=True)


def _dense(rng, shape, dtype):
    x = rng.normal(0, 3, shape).astype(DTYPES[dtype])
    y = rng.uniform(0, 1, shape)
    y = (y / y.sum(-1, keepdims=True)).astype(DTYPES[dtype])
    return x, y


def _sparse(rng, shape, dtype, label_type=np.int64):
    x = rng.normal(0, 3, shape).astype(DTYPES[dtype])
    label = rng.integers(0, shape[-1], shape[:-1]).astype(label_type)
    w = rng.uniform(0.25, 2.0, shape[:-1]).astype(DTYPES[dtype])
    return x, label, w


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 1030), (3, 5, 17), (9,)])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_dense_matches_the_reference(lib, rng, dtype, shape, reduction):
    x, y = _dense(rng, shape, dtype)
    got_y, got_lp = lib.run("SoftmaxCrossEntropy", [x, y], {"reduction": reduction})
    want_y, want_lp = softmax_cross_entropy(x.astype(np.float64), y.astype(np.float64), reduction=reduction)
    _close(got_lp, want_lp, dtype)
    _close(got_y, want_y, dtype)
    dy = (rng.normal(size=shape[:-1]) if reduction == "none" else np.array(1.5)).astype(DTYPES[dtype])
    lp = want_lp.astype(DTYPES[dtype])
    y2 = (y * 1.7).astype(DTYPES[dtype])  # rows summing to 1.7: the gradient is p * 1.7 - y
    [got] = lib.run("SoftmaxCrossEntropyGrad", [dy, lp, y2], {"reduction": reduction})
    want = softmax_cross_entropy_grad(dy.astype(np.float64), lp.astype(np.float64), y2.astype(np.float64),
                                      reduction=reduction)
    _close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 1030), (3, 5, 17), (9,)])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_matches_the_reference(lib, rng, dtype, shape, reduction, weighted):
    x, label, w = _sparse(rng, shape, dtype)
    w = w if weighted else None
    got_y, got_lp = lib.run("SparseSoftmaxCrossEntropy", [x, label, w], {"reduction": reduction})
    w64 = None if w is None else w.astype(np.float64)
    want_y, want_lp = sparse_softmax_cross_entropy(x.astype(np.float64), label, w64, reduction=reduction)
    _close(got_lp, want_lp, dtype)
    _close(got_y, want_y, dtype)
    dy = (rng.normal(size=shape[:-1]) if reduction == "none" else np.array(-0.8)).astype(DTYPES[dtype])
    lp = want_lp.astype(DTYPES[dtype])
    [got] = lib.run("SparseSoftmaxCrossEntropyGrad", [dy, lp, label, w], {"reduction": reduction})
    want = sparse_softmax_cross_entropy_grad(dy.astype(np.float64), lp.astype(np.float64), label, w64,
                                             reduction=reduction)
    _close(got, want, dtype)


def test_huge_logits_are_stable(lib):
    x = np.array([[1000.0, -1000.0, 999.0], [-5e4, -5e4 + 1, -5e4 + 2]], np.float32)
    got_y, got_lp = lib.run("SparseSoftmaxCrossEntropy", [x, np.array([1, 0])], {"reduction": "none"})
    want_y, want_lp = sparse_softmax_cross_entropy(x.astype(np.float64), np.array([1, 0]), reduction="none")
    assert np.isfinite(got_lp).all() and np.isfinite(got_y).all()
    _close(got_lp, want_lp, "float32")
    _close(got_y, want_y, "float32")


@pytest.mark.parametrize("op", ["SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad", "SparseSoftmaxCrossEntropy",
                                "SparseSoftmaxCrossEntropyGrad"])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_bitwise_the_same_at_any_thread_count(lib, rng, op, reduction):
    shape = (1003, 67)
    if op.startswith("Sparse"):
        x, label, w = _sparse(rng, shape, "float32")
        extra = [w]
    else:
        x, label = _dense(rng, shape, "float32")
        extra = []
    if op.endswith("Grad"):
        dy = (rng.normal(size=shape[:-1]) if reduction == "none" else np.array(1.0)).astype(np.float32)
        inputs = [dy, x - 5.0, label, *extra]
    else:
        inputs = [x, label, *extra]
    runs = [lib.run(op, inputs, {"reduction": reduction}, threads=t) for t in (1, 2, 3, 4)]
    for outs in runs[1:]:
        for a, b in zip(runs[0], outs):
            assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("label_type", [np.int32, np.int64])
@pytest.mark.parametrize("bad", [5, -1, 2 ** 31 - 1])
@pytest.mark.parametrize("op", ["SparseSoftmaxCrossEntropy", "SparseSoftmaxCrossEntropyGrad"])
def test_labels_outside_the_classes_are_rejected(lib, rng, label_type, bad, op):
    x, label, w = _sparse(rng, (4, 5), "float32", label_type)
    label[2] = bad
    inputs = [x, label, w] if op == "SparseSoftmaxCrossEntropy" else [np.array(1.0, np.float32), x, label, w]
    with pytest.raises(lib.KernelError) as e:
        lib.run(op, inputs)
    assert e.value.status_name == "OPC_ERR_INVALID_ARGUMENT" and f"label {bad} at element 2" in e.value.message


def test_a_huge_int64_label_is_rejected(lib, rng):
    x, label, _ = _sparse(rng, (4, 5), "float32")
    label[1] = 1 << 40
    with pytest.raises(lib.KernelError) as e:
        lib.run("SparseSoftmaxCrossEntropyGrad", [np.array(1.0, np.float32), x, label])
    assert "outside [0, 5)" in e.value.message


@pytest.mark.parametrize("op, change, status, words", [
    ("SoftmaxCrossEntropy", "label_shape", "OPC_ERR_INVALID_ARGUMENT", "label shape [3, 5]"),
    ("SoftmaxCrossEntropy", "reduction", "OPC_ERR_INVALID_ATTRIBUTE", "reduction 'batchmean'"),
    ("SoftmaxCrossEntropy", "scalar", "OPC_ERR_INVALID_ARGUMENT", "rank >= 1"),
    ("SoftmaxCrossEntropy", "label_float64", "OPC_ERR_UNSUPPORTED_DTYPE", "input label has dtype float64"),
    ("SoftmaxCrossEntropyGrad", "dy_not_scalar", "OPC_ERR_INVALID_ARGUMENT", "dY shape [4]"),
    ("SoftmaxCrossEntropyGrad", "label_shape", "OPC_ERR_INVALID_ARGUMENT", "label shape [3, 5]"),
    ("SparseSoftmaxCrossEntropy", "label_shape", "OPC_ERR_INVALID_ARGUMENT", "label shape [3]"),
    ("SparseSoftmaxCrossEntropy", "weight_shape", "OPC_ERR_INVALID_ARGUMENT", "weight shape [5]"),
    ("SparseSoftmaxCrossEntropy", "label_float", "OPC_ERR_UNSUPPORTED_DTYPE", "label has dtype float32"),
    ("SparseSoftmaxCrossEntropy", "float16", "OPC_ERR_UNSUPPORTED_DTYPE", "dtype float16 is not supported"),
    ("SparseSoftmaxCrossEntropyGrad", "dy_not_scalar", "OPC_ERR_INVALID_ARGUMENT", "dY shape [4]"),
    ("SparseSoftmaxCrossEntropyGrad", "dy_none", "OPC_ERR_INVALID_ARGUMENT", "dY shape [3]"),
    ("SparseSoftmaxCrossEntropyGrad", "reduction", "OPC_ERR_INVALID_ATTRIBUTE", "reduction 'batchmean'"),
])
def test_malformed_inputs_are_rejected(lib, rng, op, change, status, words):
    sparse, grad = op.startswith("Sparse"), op.endswith("Grad")
    x = rng.normal(size=(4, 5)).astype(np.float32)
    label = rng.integers(0, 5, 4) if sparse else np.full((4, 5), 0.2, np.float32)
    weight = np.ones(4, np.float32) if sparse else None
    dy, attrs = np.array(1.0, np.float32), {}
    if change == "label_shape":
        label = label[:3]
    elif change == "reduction":
        attrs = {"reduction": "batchmean"}
    elif change == "scalar":
        x, label = np.array(1.0, np.float32), np.array(1.0, np.float32)
    elif change == "label_float64":
        label = label.astype(np.float64)
    elif change == "dy_not_scalar":
        dy = np.ones(4, np.float32)
    elif change == "dy_none":
        dy, attrs = np.ones(3, np.float32), {"reduction": "none"}
    elif change == "weight_shape":
        weight = np.ones(5, np.float32)
    elif change == "label_float":
        label = label.astype(np.float32)
    elif change == "float16":
        x, weight = x.astype(np.float16), weight.astype(np.float16)
    inputs = [x, label] + ([weight] if sparse else [])
    if grad:
        inputs = [dy] + inputs
    with pytest.raises(lib.KernelError) as e:
        lib.run(op, inputs, attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message


def test_empty_inputs(lib):
    f32 = np.float32
    y, lp = lib.run("SparseSoftmaxCrossEntropy", [np.zeros((0, 5), f32), np.zeros(0, np.int64)])
    assert lp.shape == (0, 5) and np.isnan(y)  # mean over no element: 0/0
    y, lp = lib.run("SoftmaxCrossEntropy", [np.zeros((0, 5), f32), np.zeros((0, 5), f32)], {"reduction": "sum"})
    assert lp.shape == (0, 5) and y == 0
    [g] = lib.run("SparseSoftmaxCrossEntropyGrad", [np.array(1.0, f32), np.zeros((0, 5), f32), np.zeros(0, np.int64)])
    assert g.shape == (0, 5)
    with pytest.raises(lib.KernelError):  # no class: no label is valid
        lib.run("SparseSoftmaxCrossEntropy", [np.zeros((2, 0), f32), np.zeros(2, np.int64)])


def test_outputs_on_request(lib, rng):
    x, label, w = _sparse(rng, (6, 7), "float64")
    y_only, lp_none = lib.run("SparseSoftmaxCrossEntropy", [x, label, w], {"reduction": "sum"}, want_outputs=[True, False])
    both = lib.run("SparseSoftmaxCrossEntropy", [x, label, w], {"reduction": "sum"})
    assert lp_none is None and y_only.tobytes() == both[0].tobytes()
