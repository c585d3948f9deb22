"""SplitTraining of the C library: one exact copy along the axis per split size, 1 to 4 (numpy.split; the outputs
past the split's length empty), every dtype's bits kept (NaN payloads, -0, int32 and int64), the same bits at any
thread count, and every malformed input rejected with its status."""
from __future__ import annotations

import numpy as np
import pytest

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis, split", [
    ((2, 6), 1, [1, 2, 3]), ((6, 2), 0, [2, 1, 3]), ((2, 6, 3), -2, [3, 0, 3]), ((2, 3, 12), 2, [4, 4, 4]),
    ((5,), 0, [0, 5, 0]), ((2, 0, 3), 2, [1, 1, 1]), ((2, 5), 1, [2, 3]), ((2, 3), -1, [3]), ((2, 6), 1, [1, 2, 0, 3])])
def test_parts_are_numpy_split(lib, rng, dtype, shape, axis, split):
    x = (rng.normal(0, 1, shape) * 1000).astype(dtype)
    ys = lib.run("SplitTraining", [x, np.array(split, np.int64)], {"axis": axis})
    want = np.split(x, np.cumsum(split)[:-1], axis=axis)
    assert len(ys) == 4
    for y, w in zip(ys, want):
        assert y.dtype == x.dtype and y.shape == w.shape and y.tobytes() == w.tobytes()
    for y in ys[len(split):]:  # no such output on a node: empty
        assert y.dtype == x.dtype and y.size == 0


def test_an_output_past_the_split_need_not_be_asked_for(lib):
    x = np.arange(10, dtype=np.int64).reshape(2, 5)
    ys = lib.run("SplitTraining", [x, np.array([2, 3], np.int64)], {"axis": 1}, want_outputs=[True, True, False, False])
    assert ys[2] is None and ys[3] is None and ys[1].tolist() == [[2, 3, 4], [7, 8, 9]]


def test_default_axis_is_zero_and_bits_are_kept(lib):
    x = np.array([np.nan, -0.0, np.inf, 1e-45, -1.0, 2.0], np.float32).view(np.uint32)
    x[0] = 0x7FC01234  # a NaN payload
    x = x.view(np.float32)
    ys = lib.run("SplitTraining", [x, np.array([2, 1, 3], np.int64)])
    assert b"".join(y.tobytes() for y in ys) == x.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_thread_counts_give_the_same_bits(lib, rng, dtype):
    x = (rng.normal(0, 1, (7001, 40)) * 1000).astype(dtype)
    s = np.array([10, 25, 5], np.int64)
    outs = [lib.run("SplitTraining", [x, s], {"axis": 1}, threads=t) for t in (1, 2, 3, 4)]
    for o in outs[1:]:
        assert [a.tobytes() for a in o] == [a.tobytes() for a in outs[0]]


@pytest.mark.parametrize("change, attrs, status, words", [
    ({1: np.array([1, 2, 2], np.int64)}, {}, "OPC_ERR_INVALID_ARGUMENT", "split's 3 sizes sum to 5, not input's dim 6"),
    ({1: np.array([-1, 4, 3], np.int64)}, {}, "OPC_ERR_INVALID_ARGUMENT", "holds -1 at position 0"),
    ({1: np.array([1, 2, 3, 0, 0], np.int64)}, {}, "OPC_ERR_INVALID_ARGUMENT", "must hold 1 to 4 sizes"),
    ({1: np.zeros(0, np.int64)}, {}, "OPC_ERR_INVALID_ARGUMENT", "must hold 1 to 4 sizes"),
    ({1: np.array([[1, 2, 3]], np.int64)}, {}, "OPC_ERR_INVALID_ARGUMENT", "must hold 1 to 4 sizes"),
    ({1: np.array([1, 2, 3], np.int32)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "split has dtype int32"),
    ({}, {"axis": 1}, "OPC_ERR_INVALID_ATTRIBUTE", "axis 1 is not in the valid range [-1, 0]"),
    ({0: np.array(1.0, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "rank >= 1"),
    ({0: np.ones(6, np.bool_)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "dtype bool is not supported"),
    ({1: None}, {}, "OPC_ERR_INVALID_ARGUMENT", "required input 1 (split) is missing"),
])
def test_malformed_inputs_are_rejected(lib, change, attrs, status, words):
    ins = [np.ones(6, np.float32), np.array([1, 2, 3], np.int64)]
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run("SplitTraining", ins, attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message
