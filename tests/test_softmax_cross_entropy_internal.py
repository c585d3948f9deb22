"""SoftmaxCrossEntropyLossInternal has no forward op to check it against: its reference is proven here against onnx's
own evaluator of ai.onnx SoftmaxCrossEntropyLoss (opset 13) in float64, ignore_index passed as the attribute the
ai.onnx op takes, on every valid case of the spec's nightly tier; and the gradient op's reference (SoftmaxCrossEntropyLossInternalGrad)
against the ai.onnx gradient reference it must equal with ignore_index moved to an attribute."""
import numpy as np
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference import _onnx
from reference.ops.softmax_cross_entropy_internal import (
    softmax_cross_entropy_loss_internal,
    softmax_cross_entropy_loss_internal_grad,
)
from reference.ops.softmax_cross_entropy_loss_grad import softmax_cross_entropy_loss_grad


def _onnx_sce(scores, labels, weights, ignore_index, reduction):
    ii = None if ignore_index is None else int(ignore_index)
    with np.errstate(all="ignore"):
        return _onnx.run("SoftmaxCrossEntropyLoss", 13, {"scores": scores, "labels": labels, "weights": weights},
                         outputs=2, reduction=reduction, ignore_index=ii)


def test_reference_matches_onnx_softmax_cross_entropy_loss(catalog):
    checked = 0
    for case in cases_of(catalog, "SoftmaxCrossEntropyLossInternal", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        x = inputs["scores"].astype(np.float64)
        w = None if inputs.get("weights") is None else inputs["weights"].astype(np.float64)
        ii = inputs.get("ignore_index")
        reduction = case.attributes.get("reduction", "mean")
        got = softmax_cross_entropy_loss_internal(x, inputs["labels"], w, ii, reduction=reduction)
        if x.size == 0:  # onnx's evaluator cannot reshape zero elements: the empty sum is 0, the mean 0/0
            want = {"none": np.zeros(inputs["labels"].shape), "sum": 0.0, "mean": np.nan}[reduction]
            np.testing.assert_array_equal(got[0], want, err_msg=case.full_id)
            assert got[1].shape == x.shape
            continue
        want = _onnx_sce(x, inputs["labels"], w, ii, reduction)
        for g, o in zip(got, want):
            assert g.shape == o.shape, case.full_id
            np.testing.assert_allclose(g, o, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=case.full_id)
        checked += 1
    assert checked >= 50


def test_grad_reference_is_the_ai_onnx_gradient_with_ignore_index_as_input(catalog):
    checked = 0
    for case in cases_of(catalog, "SoftmaxCrossEntropyLossInternalGrad", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        f = {k: (None if v is None or k in ("label", "ignore_index") else v.astype(np.float64)) for k, v in inputs.items()}
        ii = inputs.get("ignore_index")
        reduction = case.attributes.get("reduction", "mean")
        got = softmax_cross_entropy_loss_internal_grad(f["dY"], f["log_prob"], inputs["label"], f.get("weight"), ii,
                                                       reduction=reduction)
        want = softmax_cross_entropy_loss_grad(f["dY"], f["log_prob"], inputs["label"], f.get("weight"),
                                               reduction=reduction, ignore_index=None if ii is None else int(ii))
        assert got.tobytes() == want.tobytes(), case.full_id
        checked += 1
    assert checked >= 50


def test_the_nightly_tier_covers_the_contract(catalog):
    cases = [c for c in cases_of(catalog, "SoftmaxCrossEntropyLossInternal", "nightly") if c.valid]
    assert {c.dtype for c in cases} == {"float32", "float64", "float16", "bfloat16"}
    assert {c.attributes.get("reduction", "mean") for c in cases} == {"none", "sum", "mean"}
    assert {c.params.get("Tind", "int64") for c in cases} == {"int64", "int32"}
    assert any("ignore_index" in c.omitted_inputs for c in cases)
