"""One validation path: opc_run checks the input values an op reads through (indices, labels, saved
statistics) on every call, whether it wants every output or none. A call that wants no output once
returned OK on out-of-range indices and labels that the same call with outputs rejected (fault found by
injecting bad values into calls without outputs)."""
from __future__ import annotations

import re

import numpy as np
import pytest

F32 = np.float32


def _gather(bad):
    idx = np.array([0, 4, bad, -5], np.int64)
    return "GatherGrad", [np.array([5, 3]), idx, np.ones((4, 3), F32)], {}, rf"indices holds {bad} at position 2"


def _gather_int32(bad):
    op, inputs, attrs, message = _gather(bad)
    inputs[1] = inputs[1].astype(np.int32)
    return op, inputs, attrs, message


def _gather_elements(bad):
    idx = np.array([0, 4, bad, -5], np.int64).reshape(4, 1)
    return ("GatherElementsGrad", [np.ones((4, 1), F32), np.array([5, 3]), idx], {},
            rf"indices holds {bad} at position 2")


def _max_pool(bad):
    idx = np.array([0, 5, bad, 7], np.int64).reshape(1, 1, 2, 2)
    return ("MaxPoolGrad", [np.ones((1, 1, 2, 2), F32), idx], {"dX_shape": [1, 1, 4, 4]},
            rf"Indices holds {bad}, outside \[0, 16\)")


def _sce(bad):
    rng = np.random.default_rng(7)
    log_prob = np.log(rng.dirichlet(np.ones(5), size=4)).astype(F32)
    label = np.array([1, 0, bad, 4], np.int64)
    return ("SoftmaxCrossEntropyLossGrad", [np.array(1.0, F32), log_prob, label], {"ignore_index": -7},
            rf"label {bad} at element 2 is outside \[0, 5\)")


CASES = {
    "GatherGrad": (_gather, [5, -6, 2**40]),
    "GatherGrad-int32": (_gather_int32, [5, -6, 2**31 - 1]),
    "GatherElementsGrad": (_gather_elements, [5, -6, -(2**63)]),
    "MaxPoolGrad": (_max_pool, [16, -1, 2**62]),
    "SoftmaxCrossEntropyLossGrad": (_sce, [5, -1, -100]),
}
PARAMS = [pytest.param(make, bad, id=f"{name}-{bad}") for name, (make, bads) in CASES.items() for bad in bads]


def _error(lib, op, inputs, attrs, want, threads=1):
    with pytest.raises(lib.KernelError) as e:
        lib.run(op, inputs, attrs, want_outputs=want, threads=threads)
    return e.value


@pytest.mark.parametrize("make, bad", PARAMS)
def test_an_out_of_range_value_is_rejected_with_or_without_outputs(lib, make, bad):
    op, inputs, attrs, message = make(bad)
    n_out = len(lib.op_info(op)["outputs"])
    for threads in (1, 2):
        without = _error(lib, op, inputs, attrs, [False] * n_out, threads)
        with_outputs = _error(lib, op, inputs, attrs, [True] * n_out, threads)
        assert without.status_name == with_outputs.status_name == "OPC_ERR_INVALID_ARGUMENT"
        assert without.message == with_outputs.message
        assert re.search(message, without.message), without.message


@pytest.mark.parametrize("make", [CASES[name][0] for name in CASES], ids=list(CASES))
def test_valid_values_without_outputs_are_ok(lib, make):
    op, inputs, attrs, _ = make(1)  # in range for every op above
    n_out = len(lib.op_info(op)["outputs"])
    assert lib.run(op, inputs, attrs, want_outputs=[False] * n_out) == [None] * n_out
    assert lib.run(op, inputs, attrs)[0] is not None


def test_ignored_labels_and_empty_class_axes_follow_the_same_path(lib):
    f32 = np.float32
    ignored = [np.array(1.0, f32), np.zeros((3, 0), f32), np.full(3, -100)]
    assert lib.run("SoftmaxCrossEntropyLossGrad", ignored, {"ignore_index": -100}, want_outputs=[False]) == [None]
    not_ignored = [np.array(1.0, f32), np.zeros((3, 0), f32), np.zeros(3, np.int64)]
    for want in ([False], [True]):
        e = _error(lib, "SoftmaxCrossEntropyLossGrad", not_ignored, {}, want)
        assert "label 0 at element 0 is outside [0, 0)" in e.message


def test_an_index_into_an_empty_dx_is_rejected_without_outputs(lib):
    for want in ([False], [True]):
        e = _error(lib, "MaxPoolGrad", [np.ones((1, 1, 1, 1), F32), np.zeros((1, 1, 1, 1), np.int64)],
                   {"dX_shape": [1, 1, 0, 4]}, want)
        assert e.message.endswith("Indices index an empty dX")
        e = _error(lib, "GatherGrad", [np.array([0, 3]), np.array([0]), np.ones((1, 3), F32)], {}, want)
        assert "indices holds 0 at position 0, outside [0, -1]" in e.message


def test_bad_saved_statistics_are_rejected_without_outputs(lib):
    x = np.ones((2, 3, 4), F32)
    inputs = [x, x, np.ones(3, F32), np.zeros(3, F32), np.array([1, 0, 1], F32)]
    for want in ([False] * 3, [True] * 3, [False, True, False]):
        e = _error(lib, "BatchNormalizationGrad", inputs, {"epsilon": 1e-5}, want)
        assert "channel 1 holds 0" in e.message


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_first_offender_is_named_whatever_the_thread_count(lib, threads):
    """Millions of indices are scanned in parallel blocks: the position named is the first one in element
    order, with outputs or without, at any thread count."""
    n = 3_000_017
    idx = np.zeros(n, np.int64)
    idx[2_500_003] = 99
    idx[n - 1] = -100  # a later offender, found in another thread's blocks
    inputs = [np.array([10]), idx, np.ones(n, F32)]
    for want in ([False], [True]):
        e = _error(lib, "GatherGrad", inputs, {}, want, threads)
        assert "indices holds 99 at position 2500003, outside [-10, 9]" in e.message
    labels = np.zeros(n, np.int32)
    labels[1_000_000] = 2
    labels[1_000_001] = 9
    sce = [np.array(1.0, F32), np.zeros((n, 2), F32), labels]
    for want in ([False], [True]):
        e = _error(lib, "SoftmaxCrossEntropyLossGrad", sce, {"ignore_index": 2}, want, threads)
        assert "label 9 at element 1000001 is outside [0, 2) and not ignore_index" in e.message
