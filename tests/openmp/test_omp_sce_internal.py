"""SoftmaxCrossEntropyLossInternalGrad of the C library (csrc/sce_loss_grad.c, shared with SoftmaxCrossEntropyLossGrad):
ignore_index read from the optional int64 scalar input (absent: no label ignored, so -1 is rejected, not ignored as
ORT's float32 kernel does), the same bits as SoftmaxCrossEntropyLossGrad with ignore_index as its attribute, output_type
naming the inputs' type accepted and any other rejected, malformed ignore_index rejected, the same bits at 1-4 threads."""
from __future__ import annotations

import numpy as np
import pytest

OP = "SoftmaxCrossEntropyLossInternalGrad"


def _inputs(rng, shape, dtype=np.float32):
    x = rng.normal(0, 3, shape)
    log_prob = (x - np.log(np.exp(x).sum(axis=1, keepdims=True))).astype(dtype)
    label = rng.integers(0, shape[1], (shape[0], *shape[2:])).astype(np.int64)
    weight = rng.uniform(0.2, 2.0, shape[1]).astype(dtype)
    return log_prob, label, weight


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_same_bits_as_the_ai_onnx_gradient_with_the_attribute(lib, rng, dtype, reduction):
    log_prob, label, weight = _inputs(rng, (3, 7, 600), dtype)
    label.reshape(-1)[::4] = -100
    dy = rng.normal(0, 2, label.shape).astype(dtype) if reduction == "none" else np.array(1.5, dtype)
    [a] = lib.run(OP, [dy, log_prob, label, weight, np.array(-100, np.int64)], {"reduction": reduction})
    [b] = lib.run("SoftmaxCrossEntropyLossGrad", [dy, log_prob, label, weight],
                  {"reduction": reduction, "ignore_index": -100})
    assert a.dtype == log_prob.dtype and a.tobytes() == b.tobytes()


def test_without_ignore_index_no_label_is_ignored(lib, rng):
    log_prob, label, _ = _inputs(rng, (4, 5))
    [a] = lib.run(OP, [np.array(1.0, np.float32), log_prob, label])
    [b] = lib.run("SoftmaxCrossEntropyLossGrad", [np.array(1.0, np.float32), log_prob, label])
    assert a.tobytes() == b.tobytes()
    label[2] = -1
    with pytest.raises(lib.KernelError) as e:
        lib.run(OP, [np.array(1.0, np.float32), log_prob, label])
    assert e.value.status_name == "OPC_ERR_INVALID_ARGUMENT" and "label -1 at element 2" in e.value.message


def test_every_label_ignored_gives_zeros_for_mean(lib, rng):
    log_prob, label, weight = _inputs(rng, (6, 5))
    label[:] = -100
    [got] = lib.run(OP, [np.array(1.0, np.float32), log_prob, label, weight, np.array(-100, np.int64)])
    assert (got == 0).all()


@pytest.mark.parametrize("ignore, words", [
    (np.array([-100], np.int64), "ignore_index must be an int64 scalar"),
    (np.array(-100, np.int32), "ignore_index must be an int64 scalar"),
])
def test_malformed_ignore_index_is_rejected(lib, rng, ignore, words):
    log_prob, label, _ = _inputs(rng, (4, 5))
    with pytest.raises(lib.KernelError) as e:
        lib.run(OP, [np.array(1.0, np.float32), log_prob, label, None, ignore])
    assert e.value.status_name == "OPC_ERR_INVALID_ARGUMENT" and words in e.value.message


def test_output_type_must_name_the_inputs_type(lib, rng):
    log_prob, label, _ = _inputs(rng, (4, 5))
    dy = np.array(1.0, np.float32)
    [a] = lib.run(OP, [dy, log_prob, label], {"output_type": 1})
    [b] = lib.run(OP, [dy, log_prob, label])
    assert a.tobytes() == b.tobytes()
    with pytest.raises(lib.KernelError) as e:
        lib.run(OP, [dy, log_prob, label], {"output_type": 10})
    assert e.value.status_name == "OPC_ERR_UNSUPPORTED_DTYPE" and "mixed precision" in e.value.message


def test_same_bits_at_any_thread_count(lib, rng):
    log_prob, label, weight = _inputs(rng, (3000, 37))
    label[::7] = -100
    args = [np.array(1.7, np.float32), log_prob, label, weight, np.array(-100, np.int64)]
    outs = [lib.run(OP, args, {"reduction": "mean"}, threads=t)[0] for t in (1, 2, 3, 4)]
    assert all(o.tobytes() == outs[0].tobytes() for o in outs[1:])
