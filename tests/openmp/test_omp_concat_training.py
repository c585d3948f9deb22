"""ConcatTraining of the C library: 1 to 4 inputs joined exactly (numpy.concatenate) with their int64 sizes
along the axis, every dtype's bits kept, the same bits at any thread count, per_input_length written also for
an empty result, and every malformed input rejected with its status."""
from __future__ import annotations

import numpy as np
import pytest

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64]


def _shapes(shape, axis, sizes):
    out = []
    for n in sizes:
        s = list(shape)
        s[axis] = n
        out.append(tuple(s))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis, sizes", [
    ((2, 6), 1, [1, 2, 3]), ((6, 2), 0, [2, 1, 3]), ((2, 6, 3), -2, [3, 0, 3]), ((2, 3, 12), 2, [4, 4, 4]),
    ((5,), 0, [0, 5, 0]), ((0, 3), 1, [3, 3, 3]), ((2, 3), 1, [0, 0, 0]), ((1,), 0, [1, 1]), ((1,), 0, [1, 1, 1, 1]),
    ((2, 3), -1, [3]), ((2, 6), 1, [1, 2, 0, 3])])
def test_result_is_numpy_concatenate(lib, rng, dtype, shape, axis, sizes):
    xs = [(rng.normal(0, 1, s) * 1000).astype(dtype) for s in _shapes(shape, axis, sizes)]
    y, lens = lib.run("ConcatTraining", xs, {"axis": axis})
    want = np.concatenate(xs, axis=axis)
    assert y.dtype == xs[0].dtype and y.shape == want.shape and y.tobytes() == want.tobytes()
    assert lens.dtype == np.int64 and lens.tolist() == sizes


def test_bits_are_kept(lib):
    x = np.array([np.nan, -0.0, np.inf, 1e-45, -1.0, 2.0], np.float32).view(np.uint32)
    x[0] = 0x7FC01234  # a NaN payload
    x = x.view(np.float32)
    y, _ = lib.run("ConcatTraining", [x[:2], x[2:3], x[3:]], {"axis": 0})
    assert y.tobytes() == x.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_thread_counts_give_the_same_bits(lib, rng, dtype):
    xs = [(rng.normal(0, 1, (7001, n)) * 1000).astype(dtype) for n in (10, 25, 5, 3)]
    outs = [lib.run("ConcatTraining", xs, {"axis": -1}, threads=t)[0] for t in (1, 2, 3, 4)]
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()


@pytest.mark.parametrize("change, attrs, status, words", [
    ({2: np.ones((3, 5), np.float32)}, {"axis": 0}, "OPC_ERR_INVALID_ARGUMENT", "input2 has shape [3, 5], input0 [2, 6]"),
    ({1: np.ones((2, 6, 1), np.float32)}, {"axis": 0}, "OPC_ERR_INVALID_ARGUMENT", "must match outside axis 0"),
    ({1: np.ones((2, 6), np.float64)}, {"axis": 0}, "OPC_ERR_INVALID_ARGUMENT", "input1 has dtype float64"),
    ({}, {"axis": 2}, "OPC_ERR_INVALID_ATTRIBUTE", "axis 2 is not in the valid range [-2, 1]"),
    ({}, {}, "OPC_ERR_INVALID_ATTRIBUTE", "axis is required"),
    ({0: np.array(1.0, np.float32), 1: np.array(1.0, np.float32), 2: np.array(1.0, np.float32)}, {"axis": 0},
     "OPC_ERR_INVALID_ARGUMENT", "scalars cannot be concatenated"),
    ({0: np.ones((2, 6), np.bool_), 1: np.ones((2, 6), np.bool_), 2: np.ones((2, 6), np.bool_)}, {"axis": 0},
     "OPC_ERR_UNSUPPORTED_DTYPE", "dtype bool is not supported"),
    ({0: None}, {"axis": 0}, "OPC_ERR_INVALID_ARGUMENT", "required input 0 (input0) is missing"),
    ({1: None}, {"axis": 0}, "OPC_ERR_INVALID_ARGUMENT", "input2 is given but input1 is missing"),
])
def test_malformed_inputs_are_rejected(lib, change, attrs, status, words):
    ins = [np.ones((2, 6), np.float32) for _ in range(3)]
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run("ConcatTraining", ins, attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message
