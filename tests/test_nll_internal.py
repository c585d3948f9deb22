"""NegativeLogLikelihoodLossInternal2 (and NegativeLogLikelihoodLossInternal, its ai.onnx opset 12 twin with the same
reference) has no forward op to check it against: its reference is proven here against
onnx's own evaluator of ai.onnx NegativeLogLikelihoodLoss (opset 13) in float64, ignore_index passed as the attribute
the ai.onnx op takes, on every valid case of the spec's nightly tier."""
import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference import _onnx
from reference.ops.nll_internal import nll_loss_internal


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLossInternal2", "NegativeLogLikelihoodLossInternal"])
def test_reference_matches_onnx_negative_log_likelihood_loss(catalog, op):
    assert catalog.by_op(op).reference == "reference.ops.nll_internal:nll_loss_internal"
    checked = 0
    for case in cases_of(catalog, op, "nightly"):
        if not case.valid or not 0 < np.prod(case.params["shape"]) <= 1_000_000:
            continue
        inputs, _ = make_tensors(case)
        x = inputs["input"].astype(np.float64)
        w = None if inputs.get("weight") is None else inputs["weight"].astype(np.float64)
        ii = inputs.get("ignore_index")
        reduction = case.attributes.get("reduction", "mean")
        got = nll_loss_internal(x, inputs["target"], w, ii, reduction=reduction)
        with np.errstate(all="ignore"):
            want = _onnx.run("NegativeLogLikelihoodLoss", 13, {"input": x, "target": inputs["target"], "weight": w},
                             reduction=reduction, ignore_index=None if ii is None else int(ii))
        assert got.shape == want.shape, case.full_id
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=case.full_id)
        checked += 1
    assert checked >= 40
