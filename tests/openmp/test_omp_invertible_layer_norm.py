"""InvertibleLayerNormalizationGrad of the C library (csrc/layer_norm.c, the LayerNormalizationGrad kernel with
xhat = (Y - bias) / scale): against LayerNormalizationGrad on the same rows (the Y that X gives), float32 and float64
statistics, the same bits at 1 to 4 threads, and every malformed input rejected."""
from __future__ import annotations

import numpy as np
import pytest

from reference.forward.layer_norm import layer_normalization
from reference.ops.invertible_layer_norm import invertible_layer_normalization_grad

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16}
OP = "InvertibleLayerNormalizationGrad"


def _inputs(rng, shape, axis, dtype, stat=np.float32):
    x = rng.normal(0.5, 2.0, shape)
    row = shape[axis % len(shape):]
    scale, bias = rng.uniform(0.5, 1.5, row), rng.normal(size=row)
    y, _, inv = layer_normalization(x, scale, bias, axis=axis)
    t = DTYPES[dtype]
    return [rng.normal(size=shape).astype(t), y.astype(t), scale.astype(t), bias.astype(t), inv.astype(stat)], x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, axis", [((3, 8), -1), ((2, 3, 5), 1), ((4, 1031), -1), ((97, 33), 1), ((1, 7), 0)])
def test_matches_the_reference_and_layer_norm_grad(lib, rng, dtype, shape, axis):
    ins, x = _inputs(rng, shape, axis, dtype)
    got = lib.run(OP, ins, {"axis": axis})
    want = invertible_layer_normalization_grad(*[a.astype(np.float64) for a in ins], axis=axis)
    rtol = {"float32": 2e-4, "float64": 1e-10, "float16": 2e-2}[dtype]
    for g, w in zip(got, want):
        assert g.dtype == ins[0].dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=rtol, atol=rtol * np.abs(w).max())
    if dtype == "float64":  # the same gradient as LayerNormalizationGrad given X and the statistics
        mean = np.mean(x, axis=tuple(range(axis % len(shape), len(shape))), keepdims=True)
        ln = lib.run("LayerNormalizationGrad", [ins[0], x, ins[2], mean, ins[4].astype(np.float64)], {"axis": axis})
        for g, w in zip(got, ln):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6 * np.abs(w).max())


@pytest.mark.parametrize("dtype", DTYPES)
def test_float64_statistics(lib, rng, dtype):
    ins, _ = _inputs(rng, (5, 12), -1, dtype, stat=np.float64)
    a = lib.run(OP, ins, {})
    ins[4] = ins[4].astype(np.float32)
    b = lib.run(OP, ins, {})
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.astype(np.float64), y.astype(np.float64), rtol=2e-3 if dtype == "float16" else 1e-5)


@pytest.mark.parametrize("shape, axis", [((67, 1031), -1), ((97, 33), 1), ((5, 9, 130), 1)])
def test_thread_counts_give_the_same_bits(lib, rng, shape, axis):
    ins, _ = _inputs(rng, shape, axis, "float32")
    runs = [lib.run(OP, ins, {"axis": axis}, threads=t) for t in (1, 2, 3, 4)]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert a.tobytes() == b.tobytes()


def _good():
    return [np.ones((3, 4), np.float32), np.ones((3, 4), np.float32), np.ones(4, np.float32), np.zeros(4, np.float32),
            np.ones((3, 1), np.float32)]


@pytest.mark.parametrize("change, attrs, status, words", [
    ({2: np.array([1, 0, 1, 1], np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "scale[1] is 0"),
    ({3: np.zeros(5, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "bias shape [5] differs from scale shape [4]"),
    ({4: np.ones((2, 1), np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "inv_std_var has 2 elements; one per row of X (3)"),
    ({0: np.ones((3, 5), np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "Y_grad shape [3, 5] differs from Y shape [3, 4]"),
    ({2: np.ones(3, np.float32)}, {}, "OPC_ERR_INVALID_ARGUMENT", "scale shape [3] differs from Y's dims from axis 1 on"),
    ({}, {"axis": 2}, "OPC_ERR_INVALID_ATTRIBUTE", "axis 2 is not in the valid range [-2, 1]"),
    ({3: np.zeros(4, np.float64)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "bias"),
    ({4: np.ones((3, 1), np.float16)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "the statistics must be"),
    ({4: None}, {}, "OPC_ERR_INVALID_ARGUMENT", "required input 4 (inv_std_var) is missing"),
])
def test_malformed_inputs_are_rejected(lib, change, attrs, status, words):
    ins = _good()
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run(OP, ins, attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message
