"""SoftmaxCrossEntropy and SparseSoftmaxCrossEntropy (ORT's legacy losses, class axis last) have no forward op to
check them against: their references are proven here against onnx's own SoftmaxCrossEntropyLoss evaluator
(reference._onnx.run, opset 13, class axis 1), a different implementation, on every valid nightly case.

Dense labels: the loss is linear in the label, so a one-hot label is SoftmaxCrossEntropyLoss of its class
indices with the same reduction, and any other label the label-weighted sum of the per-class losses (one
evaluator run per class, C <= 64). The evaluator takes log(softmax(x)), which underflows to -inf for logits a
thousand apart: there (the large_logits groups) log_prob is x - logaddexp.reduce(x), another formulation.
Sparse labels: SoftmaxCrossEntropyLoss with reduction none gives each element's -log_prob[label];
the per-element weights (which onnx's per-class weights cannot express) multiply it."""
import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference._onnx import run
from reference.ops.softmax_cross_entropy import softmax_cross_entropy
from reference.ops.softmax_cross_entropy_grad import softmax_cross_entropy_grad
from reference.ops.sparse_softmax_cross_entropy import sparse_softmax_cross_entropy
from reference.ops.sparse_softmax_cross_entropy_grad import sparse_softmax_cross_entropy_grad


def _onnx_sce(x2, labels, reduction):
    """onnx SoftmaxCrossEntropyLoss-13 on scores [R, C] (class axis 1) and labels [R]: (loss, log_prob)."""
    return run("SoftmaxCrossEntropyLoss", 13, {"scores": x2, "labels": labels.astype(np.int64)}, outputs=2,
               reduction=reduction)


def _stable(x2, labels_or_rows, reduction, dense):
    """log_prob as x - logaddexp.reduce(x) (no softmax to underflow), then the loss."""
    lp = x2 - np.logaddexp.reduce(x2, axis=1, keepdims=True)
    if dense:
        loss = -np.sum(labels_or_rows * lp, axis=1)
    else:
        loss = -lp[np.arange(len(x2)), labels_or_rows.astype(np.int64)]
    return (loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.sum() / len(x2)), lp


def _close(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=what)


def test_dense_reference_is_onnx_softmax_cross_entropy_loss(catalog):
    checked = 0
    for case in cases_of(catalog, "SoftmaxCrossEntropy", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        x = inputs["logits"].astype(np.float64)
        y = inputs["label"].astype(np.float64)
        reduction = case.attributes.get("reduction", "mean")
        C = x.shape[-1]
        rows = int(np.prod(x.shape[:-1]))
        if rows == 0 or C > 64 and not np.all(np.isin(y, (0.0, 1.0))):
            continue
        x2, y2 = x.reshape(rows, C), y.reshape(rows, C)
        got_y, got_lp = softmax_cross_entropy(x, y, reduction=reduction)
        if np.abs(x).max() > 80:
            want_y, want_lp = _stable(x2, y2, reduction, dense=True)
            _close(got_y, np.reshape(want_y, got_y.shape), f"{case.id} Y")
            _close(got_lp, np.reshape(want_lp, x.shape), f"{case.id} log_prob")
            checked += 1
            continue
        onehot = np.all(np.isin(y2, (0.0, 1.0))) and np.all(y2.sum(-1) == 1)
        if onehot:
            want_y, want_lp = _onnx_sce(x2, y2.argmax(-1), reduction)
        else:
            per_class = np.stack([_onnx_sce(x2, np.full(rows, k), "none")[0] for k in range(C)], axis=-1)
            want_lp = _onnx_sce(x2, np.zeros(rows), "none")[1]
            loss = np.sum(y2 * per_class, axis=-1)
            want_y = loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.sum() / rows
        if reduction == "none":
            want_y = np.reshape(want_y, x.shape[:-1])
        _close(got_y, want_y, f"{case.id} Y")
        _close(got_lp, np.reshape(want_lp, x.shape), f"{case.id} log_prob")
        checked += 1
    assert checked >= 15


def test_sparse_reference_is_onnx_softmax_cross_entropy_loss(catalog):
    checked = 0
    for case in cases_of(catalog, "SparseSoftmaxCrossEntropy", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        x = inputs["logits"].astype(np.float64)
        label, w = inputs["label"], inputs.get("weight")
        reduction = case.attributes.get("reduction", "mean")
        rows = int(np.prod(x.shape[:-1]))
        if rows == 0:
            continue
        x2 = x.reshape(rows, x.shape[-1])
        got_y, got_lp = sparse_softmax_cross_entropy(x, label, w, reduction=reduction)
        if np.abs(x).max() > 80 and w is None:
            want_y, want_lp = _stable(x2, label.reshape(-1), reduction, dense=False)
        elif w is None:
            want_y, want_lp = _onnx_sce(x2, label.reshape(-1), reduction)
        else:
            per, want_lp = _onnx_sce(x2, label.reshape(-1), "none")
            ww = w.astype(np.float64).reshape(-1)
            loss = per * ww
            with np.errstate(invalid="ignore", divide="ignore"):
                want_y = loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.sum() / ww.sum()
        if reduction == "none":
            want_y = np.reshape(want_y, label.shape)
        _close(got_y, want_y, f"{case.id} Y")
        _close(got_lp, np.reshape(want_lp, x.shape), f"{case.id} log_prob")
        checked += 1
    assert checked >= 15


def test_the_cases_cover_the_contract(catalog):
    for op in ("SoftmaxCrossEntropy", "SoftmaxCrossEntropyGrad", "SparseSoftmaxCrossEntropy",
               "SparseSoftmaxCrossEntropyGrad"):
        nightly = [c for c in cases_of(catalog, op, "nightly") if c.valid]
        assert {c.attributes.get("reduction", "mean") for c in nightly} == {"none", "sum", "mean"}, op
        assert {c.dtype for c in nightly} == {"float32", "float64", "float16", "bfloat16"}, op
        assert any(len(c.params["shape"]) == 3 for c in nightly), op
        assert len(cases_of(catalog, op, "ci")) <= 25, op


def test_grad_references_agree_on_one_hot_labels():
    """For one-hot labels both gradients are s * (p - onehot): the dense one with label rows, the sparse one with
    their classes."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 6)) * 3
    cls = rng.integers(0, 6, 5)
    lp = softmax_cross_entropy(x, np.eye(6)[cls], reduction="none")[1]
    for reduction, dY in (("mean", np.array(1.3)), ("sum", np.array(-0.7)), ("none", rng.normal(size=5))):
        dense = softmax_cross_entropy_grad(dY, lp, np.eye(6)[cls], reduction=reduction)
        sparse = sparse_softmax_cross_entropy_grad(dY, lp, cls, reduction=reduction)
        np.testing.assert_allclose(dense, sparse, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("op, inputs, attrs", [
    (sparse_softmax_cross_entropy, (np.zeros((2, 3)), np.array([0, 3])), {}),
    (sparse_softmax_cross_entropy, (np.zeros((2, 3)), np.array([0, -1])), {}),
    (sparse_softmax_cross_entropy, (np.zeros((2, 3)), np.array([0, 1]), np.ones(3)), {}),
    (softmax_cross_entropy, (np.zeros((2, 3)), np.zeros((2, 4))), {}),
    (softmax_cross_entropy, (np.zeros((2, 3)), np.zeros((2, 3))), {"reduction": "batchmean"}),
])
def test_invalid_inputs_are_rejected(op, inputs, attrs):
    with pytest.raises(ValueError):
        op(*inputs, **attrs)
