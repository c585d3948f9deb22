"""BatchNormInternal of the C library: both traversal modes (spatial size >= 16: a channel's planes in 16 lanes;
smaller: channel columns row by row, summed in double) against the float64 reference, training_mode 0, any subset
of outputs, empty inputs, the same bits at 1 to 4 threads, and every malformed input rejected with its status."""
from __future__ import annotations

import numpy as np
import pytest

from reference.ops.batch_norm_internal import batch_norm_internal, magnitude

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
EPS = {"float32": 2.0 ** -23, "float64": 2.0 ** -52, "float16": 2.0 ** -10}
OP = "BatchNormInternal"
NAMES = ("Y", "running_mean", "running_var", "saved_mean", "saved_inv_std")


def _inputs(rng, shape, dtype, mean=0.5):
    c = shape[1]
    arrays = (rng.normal(mean, 2.0, shape), rng.normal(1.0, 0.5, c), rng.normal(size=c), rng.normal(size=c),
              rng.uniform(0.5, 2.0, c))
    return [a.astype(DTYPES[dtype]) for a in arrays]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 4, 5, 7), (2, 3, 40), (17, 5), (6, 3, 2, 3), (1, 2, 16), (3, 70, 20, 20),
                                   (2, 3, 1037)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("training_mode", [1, 0])
def test_matches_the_reference(lib, rng, dtype, shape, training_mode):
    # 5x7 and 40: planes with a tail past the 16 lanes; 16: no tail; [17, 5] and 2x3: the column mode;
    # 1037: float16's Y in a whole block of 1024 and a block of 8 + 5
    ins = _inputs(rng, shape, dtype)
    attrs = {"epsilon": 1e-3, "momentum": 0.7, "training_mode": training_mode}
    got = lib.run(OP, ins, attrs)
    wide = [a.astype(np.float64) for a in ins]
    want = batch_norm_internal(*wide, **attrs)
    size = magnitude(*wide, **attrs)
    m = np.prod(shape) // shape[1] if training_mode else 1
    for name, g, w, s in zip(NAMES, got, want, size):
        assert g.dtype == ins[0].dtype and g.shape == w.shape, name
        if not training_mode and name != "Y":
            assert np.isnan(g.astype(np.float64)).all(), name
            continue
        # float16 data is summed in float32: its error is one float16 rounding of the result
        u = EPS[dtype] if dtype != "float16" else EPS["float32"]
        allowed = 4 * u * np.sqrt(m) * s + (EPS[dtype] * np.abs(w) if dtype == "float16" else 0)
        assert (np.abs(g.astype(np.float64) - w) <= allowed).all(), f"{name}: {np.abs(g - w).max()}"


def test_shifted_input_keeps_the_variance(lib, rng):
    """X = 1000 + N(0, 1): the two-pass variance; E[X^2] - E[X]^2 in float32 would lose it entirely."""
    ins = _inputs(rng, (8, 4, 16), "float32", mean=1000.0)
    ins[0] = (1000.0 + rng.normal(size=(8, 4, 16))).astype(np.float32)
    inv = lib.run(OP, ins, {})[4]
    want = batch_norm_internal(*[a.astype(np.float64) for a in ins])[4]
    np.testing.assert_allclose(inv, want, rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3, 67, 131), (3, 70, 20, 20), (70001, 2), (1000, 37, 3), (2, 1, 40001)],
                         ids=lambda s: "x".join(map(str, s)))
def test_thread_counts_give_the_same_bits(lib, rng, dtype, shape):
    ins = _inputs(rng, shape, dtype)
    runs = [lib.run(OP, ins, {"momentum": 0.3}, threads=t) for t in (1, 2, 3, 4)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("shape", [(4, 3, 33), (50, 6)], ids=["planes", "columns"])
def test_any_subset_of_outputs_is_bitwise_the_full_run(lib, rng, shape):
    ins = _inputs(rng, shape, "float32")
    full = lib.run(OP, ins, {})
    for want in ([True, False, False, False, False], [False, True, True, False, False], [False, False, False, True, True]):
        part = lib.run(OP, ins, {}, want_outputs=want)
        for w, a, b in zip(want, full, part):
            assert (b is None) if not w else a.tobytes() == b.tobytes()


@pytest.mark.parametrize("shape", [(0, 3, 4), (0, 3, 20), (2, 3, 0), (2, 0, 4), (0, 2)])
def test_empty_inputs_have_zero_statistics(lib, shape):
    c = shape[1]
    ins = [np.zeros(shape, np.float32), np.ones(c, np.float32), np.zeros(c, np.float32), np.full(c, 2, np.float32),
           np.ones(c, np.float32)]
    y, rm, rv, mean, inv = lib.run(OP, ins, {"epsilon": 0.25, "momentum": 0.5})
    assert y.shape == shape and mean.shape == (c,)
    np.testing.assert_array_equal(mean, np.zeros(c))
    np.testing.assert_array_equal(inv, np.full(c, 2.0))
    np.testing.assert_array_equal(rm, np.ones(c))
    np.testing.assert_array_equal(rv, np.full(c, 0.5))


def _good():
    return [np.ones((2, 3, 4), np.float32)] + [np.ones(3, np.float32) for _ in range(4)]


@pytest.mark.parametrize("change, attrs, status, words", [
    ({0: np.ones(3, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "rank >= 2"),
    ({1: np.ones(4, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "scale shape [4] must be [C] = [3]"),
    ({2: np.ones((3, 1), np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "B shape [3, 1] must be [C] = [3]"),
    ({3: np.ones(2, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "input_mean shape [2] must be [C] = [3]"),
    ({4: np.ones(0, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "input_var shape [0] must be [C] = [3]"),
    ({}, {"epsilon": -1.0}, "OPC_ERR_INVALID_ATTRIBUTE", "must be finite and >= 0"),
    ({}, {"epsilon": float("nan")}, "OPC_ERR_INVALID_ATTRIBUTE", "must be finite and >= 0"),
    ({}, {"momentum": 2.0}, "OPC_ERR_INVALID_ATTRIBUTE", "momentum 2 must lie in [0, 1]"),
    ({}, {"momentum": -0.5}, "OPC_ERR_INVALID_ATTRIBUTE", "must lie in [0, 1]"),
    ({}, {"training_mode": 2}, "OPC_ERR_INVALID_ATTRIBUTE", "training_mode 2 must be 0 or 1"),
    ({3: np.zeros(3, np.float64)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "input_mean"),
    ({0: np.ones((2, 3, 4), np.float16)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "scale"),
    ({i: np.ones(s, np.int32) for i, s in enumerate([(2, 3, 4)] + [(3,)] * 4)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE",
     "int32"),
    ({4: None}, {}, "OPC_ERR_INVALID_ARGUMENT", "required input 4 (input_var) is missing"),
])
def test_malformed_inputs_are_rejected(lib, change, attrs, status, words):
    ins = _good()
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run(OP, ins, attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message
