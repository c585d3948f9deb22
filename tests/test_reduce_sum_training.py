"""ReduceSumTraining has no forward op to check it against: its reference (one np.sum) is proven here against
onnx's ReduceSum-13 evaluator (reference.forward.reductions:reduce_sum, reference._onnx.run), a different code
path, on every valid case of the spec's nightly tier and on a few configurations of its own; plus the validity
rules the spec's hook enforces."""
import numpy as np
import pytest
from conftest import cases_of

from harness.core.tensors import make_tensors
from reference.forward.reductions import reduce_sum as onnx_reduce_sum
from reference.ops.reduce_sum_training import check, reduce_sum_training


def test_reference_is_onnx_reduce_sum_on_every_valid_case(catalog):
    checked = 0
    for case in cases_of(catalog, "ReduceSumTraining", "nightly"):
        if not case.valid:
            continue
        inputs, _ = make_tensors(case)
        x, axes = inputs["data"].astype(np.float64), inputs["axes"].astype(np.int64)
        attrs = {k: int(case.attributes.get(k, d)) for k, d in (("keepdims", 1), ("noop_with_empty_axes", 0))}
        got = reduce_sum_training(x, axes, **attrs)
        want = onnx_reduce_sum(x, axes, **attrs)
        assert got.shape == want.shape, case.id
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=case.id)
        checked += 1
    assert checked >= 60


@pytest.mark.parametrize("shape, axes, keepdims, noop", [
    ((2, 3, 4), [0, 2], 0, 0), ((2, 3, 4), [-1], 1, 0), ((5,), [], 0, 0), ((2, 3), [], 1, 1), ((), [], 0, 0),
    ((2, 0, 3), [1], 1, 0), ((3, 1, 2), [1, 2], 0, 0),
])
def test_reference_is_onnx_reduce_sum(shape, axes, keepdims, noop):
    x = np.random.default_rng(7).normal(size=shape)
    ax = np.array(axes, np.int64)
    got = reduce_sum_training(x, ax, keepdims=keepdims, noop_with_empty_axes=noop)
    want = onnx_reduce_sum(x, ax, keepdims=keepdims, noop_with_empty_axes=noop)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("axes, words", [([3], "outside [-3, 2]"), ([1, -2], "twice"), ([[1]], "1-D")])
def test_invalid_axes(axes, words):
    problem = check({"data": np.zeros((2, 3, 4)), "axes": np.array(axes, np.float64)}, {"keepdims": 1})
    assert problem and words in problem


def test_valid_axes():
    assert check({"data": np.zeros((2, 3, 4)), "axes": np.array([0, -1], np.float64)}, {"keepdims": 0}) is None
