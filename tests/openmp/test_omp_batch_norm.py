"""BatchNormalizationGrad of the C library: both traversal modes (spatial size >= 16: one channel's planes
at a time; smaller: channel columns row by row) against the float64 reference, any subset of outputs,
empty inputs, and every malformed input rejected with its status."""
from __future__ import annotations

import numpy as np
import pytest

from reference.forward.batch_norm import batch_norm_internal
from reference.ops.batch_norm_grad import batch_norm_grad_magnitude, batch_normalization_grad

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
EPS = {"float32": 2.0 ** -23, "float64": 2.0 ** -52, "float16": 2.0 ** -10}
OP = "BatchNormalizationGrad"


def _inputs(rng, shape, dtype):
    x = rng.normal(0.5, 2.0, shape)
    c = shape[1]
    scale = rng.normal(1.0, 0.5, c)
    *_, mean, inv = batch_norm_internal(x, scale, np.zeros(c), np.zeros(c), np.ones(c), epsilon=1e-5)
    return [a.astype(DTYPES[dtype]) for a in (rng.normal(size=shape), x, scale, mean, inv)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 4, 5, 7), (2, 3, 40), (17, 5), (6, 3, 2, 3), (1, 2, 16), (3, 70, 20, 20),
                                   (2, 3, 1037)], ids=lambda s: "x".join(map(str, s)))
def test_matches_the_reference(lib, rng, dtype, shape):
    # 5x7 and 40: planes with a tail past the 16 lanes; 16: no tail; 70 channels: several cache-sized blocks;
    # [17, 5] and 2x3: the column mode; 1037: float16's X_grad in a whole block of 1024 and a block of 8 + 5
    ins = _inputs(rng, shape, dtype)
    got = lib.run(OP, ins, {"epsilon": 1e-5})
    wide = [a.astype(np.float64) for a in ins]
    want = batch_normalization_grad(*wide)
    size = batch_norm_grad_magnitude(*wide)
    m = np.prod(shape) // shape[1]
    for name, g, w, s in zip(("X_grad", "scale_grad", "bias_grad"), got, want, size):
        assert g.dtype == ins[0].dtype and g.shape == w.shape, name
        # float16 data is summed in float32: its error is one float16 rounding of the result
        u = EPS[dtype] if dtype != "float16" else EPS["float32"]
        allowed = 4 * u * np.sqrt(m) * s + (EPS[dtype] * np.abs(w) if dtype == "float16" else 0)
        assert (np.abs(g.astype(np.float64) - w) <= allowed).all(), f"{name}: {np.abs(g - w).max()}"


@pytest.mark.parametrize("shape", [(4, 3, 33), (50, 6)], ids=["planes", "columns"])
def test_any_subset_of_outputs_is_bitwise_the_full_run(lib, rng, shape):
    ins = _inputs(rng, shape, "float32")
    full = lib.run(OP, ins, {"epsilon": 1e-5})
    for want in ([True, False, False], [False, True, True], [False, False, True]):
        part = lib.run(OP, ins, {"epsilon": 1e-5}, want_outputs=want)
        for w, a, b in zip(want, full, part):
            assert (b is None) if not w else a.tobytes() == b.tobytes()


@pytest.mark.parametrize("shape", [(0, 3, 4), (0, 3, 20), (2, 3, 0), (2, 0, 4), (0, 2)])
def test_empty_inputs(lib, shape):
    c = shape[1]
    ins = [np.zeros(shape, np.float32), np.zeros(shape, np.float32), np.ones(c, np.float32),
           np.zeros(c, np.float32), np.ones(c, np.float32)]
    dx, ds, db = lib.run(OP, ins, {"epsilon": 1e-5})
    assert dx.shape == shape and ds.shape == db.shape == (c,)
    assert not ds.any() and not db.any()


def test_epsilon_does_not_change_the_result(lib, rng):
    ins = _inputs(rng, (4, 3, 20), "float32")
    a = lib.run(OP, ins, {"epsilon": 1e-5})
    b = lib.run(OP, ins, {"epsilon": 0.0})
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b))


def _good():
    return [np.ones((2, 3, 4), np.float32), np.ones((2, 3, 4), np.float32), np.ones(3, np.float32),
            np.zeros(3, np.float32), np.ones(3, np.float32)]


@pytest.mark.parametrize("change, attrs, status, words", [
    ({0: np.ones(3, np.float32), 1: np.ones(3, np.float32)}, None, "OPC_ERR_INVALID_ARGUMENT", "rank >= 2"),
    ({0: np.ones((2, 3, 5), np.float32)}, None, "OPC_ERR_INVALID_ARGUMENT",
     "dY shape [2, 3, 5] differs from X shape [2, 3, 4]"),
    ({2: np.ones(4, np.float32)}, None, "OPC_ERR_INVALID_ARGUMENT", "scale shape [4] must be [C] = [3]"),
    ({3: np.ones((3, 1), np.float32)}, None, "OPC_ERR_INVALID_ARGUMENT", "mean shape [3, 1] must be [C] = [3]"),
    ({4: np.ones(2, np.float32)}, None, "OPC_ERR_INVALID_ARGUMENT", "variance shape [2] must be [C] = [3]"),
    ({4: np.array([1, 0, 1], np.float32)}, None, "OPC_ERR_INVALID_ARGUMENT", "channel 1 holds 0"),
    ({4: np.array([1, 1, -2], np.float32)}, None, "OPC_ERR_INVALID_ARGUMENT", "channel 2 holds -2"),
    ({4: np.array([np.nan, 1, 1], np.float32)}, None, "OPC_ERR_INVALID_ARGUMENT", "must be > 0; channel 0"),
    ({}, {}, "OPC_ERR_INVALID_ATTRIBUTE", "attribute epsilon is required"),
    ({}, {"epsilon": -1.0}, "OPC_ERR_INVALID_ATTRIBUTE", "must be finite and >= 0"),
    ({}, {"epsilon": float("nan")}, "OPC_ERR_INVALID_ATTRIBUTE", "must be finite and >= 0"),
    ({}, {"epsilon": float("inf")}, "OPC_ERR_INVALID_ATTRIBUTE", "must be finite and >= 0"),
    ({3: np.zeros(3, np.float64)}, None, "OPC_ERR_UNSUPPORTED_DTYPE", "mean"),
    ({0: np.ones((2, 3, 4), np.float16)}, None, "OPC_ERR_UNSUPPORTED_DTYPE", "dY"),
    ({i: np.ones(s, np.int32) for i, s in enumerate([(2, 3, 4)] * 2 + [(3,)] * 3)}, None,
     "OPC_ERR_UNSUPPORTED_DTYPE", "int32"),
    ({4: None}, None, "OPC_ERR_INVALID_ARGUMENT", "required input 4 (variance) is missing"),
])
def test_malformed_inputs_are_rejected(lib, change, attrs, status, words):
    ins = _good()
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run(OP, ins, {"epsilon": 1e-5} if attrs is None else attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message
