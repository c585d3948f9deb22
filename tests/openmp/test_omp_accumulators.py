"""InPlaceAccumulatorV2, InPlaceAccumulator and ZeroGradient of the C library: the exact sum (or value, or old_sum)
rounded once to the buffer's type for every pair of float types, updated_flag [true], +0 from ZeroGradient whatever
reset_signal is, the same bits at any thread count, and every malformed input (shapes that differ, flags of more than
one value or not bool) rejected with its status."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
EXACT = ["float32", "float64", "float16"]  # numpy rounds float64 to these directly (once)


def _values(rng, n, dtype):
    """normal values with a few specials (inf, NaN, the largest finite, subnormal-ish) in the dtype"""
    x = rng.normal(0, 1, n) * np.exp2(rng.integers(-8, 8, n))
    x[:: 97] = np.inf
    x[5:: 131] = np.nan
    x[7:: 113] = float(np.finfo(DTYPES[dtype]).max) if dtype != "bfloat16" else 3.0e38
    return x.astype(DTYPES[dtype])


@pytest.mark.parametrize("t", EXACT)
@pytest.mark.parametrize("g", EXACT)
def test_v2_adds_exactly_and_rounds_once(lib, rng, t, g):
    b, v = _values(rng, 5000, t), _values(rng, 5000, g)
    with np.errstate(all="ignore"):
        want = (b.astype(np.float64) + v.astype(np.float64)).astype(DTYPES[t])
    flag, out = lib.run("InPlaceAccumulatorV2", [b, v, None])
    assert flag.dtype == bool and flag.tolist() == [True]
    assert out.dtype == b.dtype and out.shape == b.shape
    nan = np.isnan(want)
    assert np.isnan(out[nan]).all() and out[~nan].tobytes() == want[~nan].tobytes()
    [s] = lib.run("InPlaceAccumulator", [b, v, np.array(True)])
    assert np.isnan(s[nan]).all() and s[~nan].tobytes() == want[~nan].tobytes()


@pytest.mark.parametrize("t", EXACT)
@pytest.mark.parametrize("g", EXACT)
def test_v2_overwrite_is_value_rounded_once(lib, rng, t, g):
    b, v = _values(rng, 3000, t), rng.normal(0, 1, 3000).astype(DTYPES[g])
    v[:40] = np.float64(1) + np.arange(40) * 2.0 ** -12  # near float16 rounding midpoints
    want = v.astype(np.float64).astype(DTYPES[t])
    _, out = lib.run("InPlaceAccumulatorV2", [b, v, np.array([True])])
    assert out.tobytes() == want.tobytes()


def test_float64_to_16_bit_rounds_once_not_through_float32(lib):
    """1 + 2^-11 + 2^-40 rounds up to float16's 1 + 2^-10; through float32 (1 + 2^-11, a tie) it would round to 1."""
    b = np.zeros(2, np.float16)
    v = np.array([1 + 2 ** -11 + 2 ** -40, -(1 + 2 ** -11 + 2 ** -40)])
    _, out = lib.run("InPlaceAccumulatorV2", [b, v, np.array(True)])
    assert out.tolist() == [1 + 2 ** -10, -(1 + 2 ** -10)]
    _, out = lib.run("InPlaceAccumulatorV2", [b, v, np.array(False)])
    assert out.tolist() == [1 + 2 ** -10, -(1 + 2 ** -10)]
    big = lib.run("InPlaceAccumulatorV2", [np.zeros(2, ml_dtypes.bfloat16), np.array([1e300, -1e300]), np.array(True)])[1]
    assert np.isinf(big.astype(np.float32)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_same_type_sums_and_flags(lib, rng, dtype):
    b = rng.normal(0, 1, 999).astype(DTYPES[dtype])
    v = rng.normal(0, 1, 999).astype(DTYPES[dtype])
    want = (b.astype(np.float32) + v.astype(np.float32)).astype(DTYPES[dtype]) if dtype != "float64" else b + v
    for flag in (None, np.array(False), np.array([False])):
        _, out = lib.run("InPlaceAccumulatorV2", [b, v, flag])
        assert out.tobytes() == want.tobytes()
    _, out = lib.run("InPlaceAccumulatorV2", [b, v, np.array(True)])
    assert out.tobytes() == v.tobytes()
    [s] = lib.run("InPlaceAccumulator", [b, v, None])
    assert s.tobytes() == want.tobytes()
    [s] = lib.run("InPlaceAccumulator", [b, v, np.array([False])])
    assert s.tobytes() == b.tobytes()


def test_update_signal_false_keeps_old_sum_bits(lib):
    b = np.array([np.nan, -0.0, np.inf, 1.5], np.float32)
    b.view(np.uint32)[0] |= 0x12345  # a NaN payload survives
    [s] = lib.run("InPlaceAccumulator", [b, np.ones(4, np.float64), np.array(False)])
    assert s.tobytes() == b.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("signal", [np.array(True), np.array(False), np.zeros((2, 3), np.int64), np.zeros(0, np.float32),
                                    np.array(7.0, np.float16)])
def test_zero_gradient_is_positive_zero(lib, dtype, signal):
    g = np.array([[np.nan, -np.inf, -0.0], [1.0, -2.0, 3.0]]).astype(DTYPES[dtype])
    [z] = lib.run("ZeroGradient", [g, signal])
    assert z.dtype == g.dtype and z.shape == g.shape and not z.view(np.uint8).any()


def test_empty_and_scalar(lib):
    _, out = lib.run("InPlaceAccumulatorV2", [np.ones((3, 0), np.float32), np.ones((3, 0), np.float32), None])
    assert out.shape == (3, 0)
    flag, out = lib.run("InPlaceAccumulatorV2", [np.array(1.5, np.float32), np.array(2.25, np.float32), None])
    assert out.shape == () and out == 3.75 and flag.tolist() == [True]
    [z] = lib.run("ZeroGradient", [np.ones((0,), np.float16), np.array(True)])
    assert z.shape == (0,)


def test_updated_flag_alone(lib):
    flag, out = lib.run("InPlaceAccumulatorV2", [np.ones(3, np.float32), np.ones(3, np.float32), None],
                        want_outputs=[True, False])
    assert flag.tolist() == [True] and out is None


@pytest.mark.parametrize("op", ["InPlaceAccumulatorV2", "InPlaceAccumulator", "ZeroGradient"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("mixed", [False, True])
def test_thread_counts_give_the_same_bits(lib, rng, op, dtype, mixed):
    n = 3 * 65537 + 5
    b = rng.normal(0, 1, n).astype(DTYPES[dtype])
    v = rng.normal(0, 1, n).astype(np.float64 if mixed else DTYPES[dtype])
    ins = [b, np.array(True)] if op == "ZeroGradient" else [b, v, np.array(op == "InPlaceAccumulator")]
    outs = [lib.run(op, ins, threads=t)[-1] for t in (1, 2, 3, 4)]
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()


@pytest.mark.parametrize("op", ["InPlaceAccumulatorV2", "InPlaceAccumulator"])
@pytest.mark.parametrize("change, status, words", [
    ({1: np.ones(1, np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "value has shape [1]"),
    ({1: np.ones(4, np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "they must be equal"),
    ({1: np.ones((1, 3), np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "value has shape [1, 3]"),
    ({2: np.array([True, False])}, "OPC_ERR_INVALID_ARGUMENT", "must hold exactly one bool, got shape [2]"),
    ({2: np.zeros(0, bool)}, "OPC_ERR_INVALID_ARGUMENT", "must hold exactly one bool, got shape [0]"),
    ({2: np.array(1.0, np.float32)}, "OPC_ERR_UNSUPPORTED_DTYPE", "must be bool"),
    ({1: np.ones(3, np.int32)}, "OPC_ERR_UNSUPPORTED_DTYPE", "value has dtype int32"),
    ({0: np.ones(3, np.int64)}, "OPC_ERR_UNSUPPORTED_DTYPE", "dtype int64 is not supported"),
    ({1: None}, "OPC_ERR_INVALID_ARGUMENT", "required input 1 (value) is missing"),
])
def test_malformed_inputs_are_rejected(lib, op, change, status, words):
    ins = [np.ones(3, np.float32), np.ones(3, np.float32), np.array(True)]
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run(op, ins)
    assert e.value.status_name == status and words in e.value.message, e.value.message


@pytest.mark.parametrize("change, status, words", [
    ({1: None}, "OPC_ERR_INVALID_ARGUMENT", "required input 1 (reset_signal) is missing"),
    ({0: np.ones(3, np.int32)}, "OPC_ERR_UNSUPPORTED_DTYPE", "dtype int32 is not supported"),
])
def test_zero_gradient_malformed(lib, change, status, words):
    ins = [np.ones(3, np.float32), np.array(True)]
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run("ZeroGradient", ins)
    assert e.value.status_name == status and words in e.value.message, e.value.message


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_outputs_past_the_caches_stream_with_the_same_bits(lib, rng, dtype):
    """Outputs of 64 MiB and more take the non-temporal store path (csrc/accumulators.c): the same IEEE sums,
    an unaligned output start and a tail, at 1 and 2 threads."""
    n = (64 << 20) // np.dtype(dtype).itemsize + 7
    b = rng.standard_normal(n, dtype=np.float32).astype(dtype)
    v = rng.standard_normal(n, dtype=np.float32).astype(dtype)
    want = b + v
    out = np.empty(n + 1, dtype)[1:]  # not 64-byte aligned
    for t in (1, 2):
        lib.run("InPlaceAccumulatorV2", [b, v, None], out=[None, out], threads=t)
        assert out.tobytes() == want.tobytes()
        out[:] = 0
