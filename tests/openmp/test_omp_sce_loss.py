"""SoftmaxCrossEntropyLossInternal and NegativeLogLikelihoodLossInternal2 of the C library (csrc/sce_loss.c), and
NegativeLogLikelihoodLossInternal (NegativeLogLikelihoodLossInternal2's functions under its ai.onnx opset 12 name): every
label checked before it is read through (without ignore_index, -1 is rejected: ORT's float32 kernel ignores it and its
function body reads class C-1), the references' values, mean over nothing = NaN, malformed inputs and attributes
rejected with their status, the same bits at 1-4 threads."""
from __future__ import annotations

import numpy as np
import pytest

from reference.ops.nll_internal import nll_loss_internal
from reference.ops.softmax_cross_entropy_internal import softmax_cross_entropy_loss_internal

SCE, NLL = "SoftmaxCrossEntropyLossInternal", "NegativeLogLikelihoodLossInternal2"


def _inputs(rng, shape, dtype=np.float32, label_type=np.int64):
    x = rng.normal(0, 3, shape).astype(dtype)
    label = rng.integers(0, shape[1], (shape[0], *shape[2:])).astype(label_type)
    weight = rng.uniform(0.2, 2.0, shape[1]).astype(dtype)
    return x, label, weight


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(37, 11), (3, 5, 40)])
def test_matches_the_references(lib, rng, dtype, reduction, shape):
    x, label, weight = _inputs(rng, shape, dtype)
    label.reshape(-1)[::5] = -100
    ii = np.array(-100, np.int64)
    rtol = {np.float32: 1e-6, np.float64: 1e-13, np.float16: 2e-3}[dtype]
    out, log_prob = lib.run(SCE, [x, label, weight, ii], {"reduction": reduction})
    want_out, want_lp = softmax_cross_entropy_loss_internal(x.astype(np.float64), label, weight.astype(np.float64), ii,
                                                            reduction=reduction)
    assert out.dtype == x.dtype and out.shape == want_out.shape and log_prob.shape == x.shape
    np.testing.assert_allclose(log_prob.astype(np.float64), want_lp, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(out.astype(np.float64), want_out, rtol=rtol, atol=rtol)
    lp = log_prob.astype(dtype)
    [loss] = lib.run(NLL, [lp, label, weight, ii], {"reduction": reduction})
    want = nll_loss_internal(lp.astype(np.float64), label, weight.astype(np.float64), ii, reduction=reduction)
    np.testing.assert_allclose(loss.astype(np.float64), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("op", [SCE, NLL])
def test_mean_with_every_label_ignored_is_nan_and_ignored_elements_are_zero(lib, rng, op):
    x, label, weight = _inputs(rng, (6, 5))
    label[:] = 3
    x[:, 3] = np.nan  # an ignored element's input never reaches its loss (NLL: input[target] is NaN)
    ii = np.array(3, np.int64)
    assert np.isnan(lib.run(op, [x, label, weight, ii])[0])
    assert (lib.run(op, [x, label, weight, ii], {"reduction": "none"})[0] == 0).all()
    assert lib.run(op, [x, label, None, ii], {"reduction": "sum"})[0] == 0


@pytest.mark.parametrize("op", [SCE, NLL])
@pytest.mark.parametrize("label_type", [np.int32, np.int64])
@pytest.mark.parametrize("bad, ignore", [(5, -100), (-1, None), (-100, None), (2 ** 31 - 1, -7)])
def test_labels_outside_the_classes_are_rejected(lib, rng, op, label_type, bad, ignore):
    x, label, weight = _inputs(rng, (4, 5), label_type=label_type)
    label[2] = bad
    ii = None if ignore is None else np.array(ignore, np.int64)
    with pytest.raises(lib.KernelError) as e:
        lib.run(op, [x, label, weight, ii])
    assert e.value.status_name == "OPC_ERR_INVALID_ARGUMENT" and f" {bad} at element 2" in e.value.message


@pytest.mark.parametrize("op", [SCE, NLL])
@pytest.mark.parametrize("change, status, words", [
    ("label_shape", "OPC_ERR_INVALID_ARGUMENT", "without axis 1"),
    ("weight_shape", "OPC_ERR_INVALID_ARGUMENT", "is not [C]"),
    ("ignore_shape", "OPC_ERR_INVALID_ARGUMENT", "ignore_index must be an int64 scalar"),
    ("ignore_int32", "OPC_ERR_INVALID_ARGUMENT", "ignore_index must be an int64 scalar"),
    ("rank1", "OPC_ERR_INVALID_ARGUMENT", "rank >= 2"),
    ("reduction", "OPC_ERR_INVALID_ATTRIBUTE", "is not none, sum or mean"),
    ("float_label", "OPC_ERR_UNSUPPORTED_DTYPE", "must be int32 or int64"),
])
def test_malformed_inputs_are_rejected(lib, rng, op, change, status, words):
    x, label, weight = _inputs(rng, (4, 5))
    ii, attrs = np.array(-100, np.int64), {}
    if change == "label_shape":
        label = label[:3]
    elif change == "weight_shape":
        weight = weight[:4]
    elif change == "ignore_shape":
        ii = np.array([-100], np.int64)
    elif change == "ignore_int32":
        ii = np.array(-100, np.int32)
    elif change == "rank1":
        x = x[:, 0]
    elif change == "reduction":
        attrs = {"reduction": "batchmean"}
    elif change == "float_label":
        label = label.astype(np.float32)
    with pytest.raises(lib.KernelError) as e:
        lib.run(op, [x, label, weight, ii], attrs)
    assert e.value.status_name == status and words in e.value.message


def test_output_type_must_name_the_inputs_type(lib, rng):
    x, label, _ = _inputs(rng, (4, 5))
    a = lib.run(SCE, [x, label], {"output_type": 1})
    b = lib.run(SCE, [x, label])
    assert all(p.tobytes() == q.tobytes() for p, q in zip(a, b))
    with pytest.raises(lib.KernelError) as e:
        lib.run(SCE, [x, label], {"output_type": 11})
    assert e.value.status_name == "OPC_ERR_UNSUPPORTED_DTYPE" and "mixed precision" in e.value.message


@pytest.mark.parametrize("op", [SCE, NLL])
@pytest.mark.parametrize("shape", [(3000, 37), (3, 5, 1100)])
def test_same_bits_at_any_thread_count(lib, rng, op, shape):
    x, label, weight = _inputs(rng, shape)
    label.reshape(-1)[::7] = -100
    args = [x, label, weight, np.array(-100, np.int64)]
    for reduction in ("mean", "none"):
        outs = [lib.run(op, args, {"reduction": reduction}, threads=t) for t in (1, 2, 3, 4)]
        assert all(all(p.tobytes() == q.tobytes() for p, q in zip(o, outs[0])) for o in outs[1:])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_opset_12_name_runs_the_same_kernel(lib, rng, reduction):
    x, clean, weight = _inputs(rng, (3, 6, 4))
    label = clean.copy()
    label.reshape(-1)[::5] = -100
    ii = np.array(-100, np.int64)
    for args in ([x, label, weight, ii], [x, label, None, ii], [x, clean]):
        [a] = lib.run(NLL, args, {"reduction": reduction})
        [b] = lib.run("NegativeLogLikelihoodLossInternal", args, {"reduction": reduction})
        assert a.tobytes() == b.tobytes() and a.shape == b.shape
    with pytest.raises(lib.KernelError) as e:
        lib.run("NegativeLogLikelihoodLossInternal", [x, label])  # -100 with no ignore_index: outside [0, C)
    assert e.value.status_name.startswith("OPC_ERR")
