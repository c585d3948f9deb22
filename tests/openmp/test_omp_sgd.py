"""SGDOptimizer of the C library: NW = W - ETA * G and NG = -ETA * G bitwise as the double formula rounded once,
either output alone, the same bits at any thread count, and every malformed input rejected with its status."""
from __future__ import annotations

import numpy as np
import pytest

DTYPES = {"float32": np.float32, "float64": np.float64}


def _formula(eta, w, g):
    """Written out elementwise in float64 (not the reference module), rounded once to w's type."""
    e = float(eta.reshape(-1)[0])
    d = np.array([-e * float(v) for v in g.reshape(-1)]).reshape(g.shape)
    return (w.astype(np.float64) + d).astype(w.dtype), d.astype(w.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_step_and_update(lib, rng, dtype):
    w = rng.normal(0, 1, (5, 37)).astype(DTYPES[dtype])
    g = rng.normal(0, 1, (5, 37)).astype(DTYPES[dtype])
    eta = np.array([0.1], np.float32)
    nw, ng = lib.run("SGDOptimizer", [eta, w, g])
    want_w, want_g = _formula(eta, w, g)
    assert nw.dtype == w.dtype and nw.shape == w.shape
    np.testing.assert_array_equal(nw, want_w)
    np.testing.assert_array_equal(ng, want_g)


@pytest.mark.parametrize("want", [[True, False], [False, True], [False, False]])
def test_either_output_alone(lib, rng, want):
    w, g = rng.normal(0, 1, 100).astype(np.float32), rng.normal(0, 1, 100).astype(np.float32)
    eta = np.array([0.25], np.float32)
    full = lib.run("SGDOptimizer", [eta, w, g])
    got = lib.run("SGDOptimizer", [eta, w, g], want_outputs=want)
    for k in range(2):
        if want[k]:
            np.testing.assert_array_equal(got[k], full[k])
        else:
            assert got[k] is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_thread_counts_give_the_same_bits(lib, rng, dtype):
    w = rng.normal(0, 1, 200003).astype(DTYPES[dtype])
    g = rng.normal(0, 1, 200003).astype(DTYPES[dtype])
    outs = [lib.run("SGDOptimizer", [np.array([0.01], np.float32), w, g], threads=t) for t in (1, 2, 3, 4)]
    for o in outs[1:]:
        assert o[0].tobytes() == outs[0][0].tobytes() and o[1].tobytes() == outs[0][1].tobytes()


def test_empty_and_scalar(lib):
    nw, ng = lib.run("SGDOptimizer", [np.array([1.0], np.float32), np.ones((3, 0)), np.ones((3, 0))])
    assert nw.shape == (3, 0) and ng.shape == (3, 0)
    nw, ng = lib.run("SGDOptimizer", [np.array(0.5, np.float32), np.array(2.0), np.array(4.0)])
    assert nw.shape == () and nw == 0.0 and ng == -2.0


@pytest.mark.parametrize("change, status, words", [
    ({2: np.ones(5, np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "G has shape [5] but W has [4]"),
    ({2: np.ones((4, 1), np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "they must be equal"),
    ({0: np.array([0.1, 0.2], np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "ETA must hold exactly one value"),
    ({0: np.zeros(0, np.float32)}, "OPC_ERR_INVALID_ARGUMENT", "ETA must hold exactly one value"),
    ({0: np.array([0.1])}, "OPC_ERR_UNSUPPORTED_DTYPE", "ETA has dtype float64"),
    ({2: np.ones(4)}, "OPC_ERR_UNSUPPORTED_DTYPE", "all float inputs must share one dtype"),
    ({1: np.ones(4, np.int32), 2: np.ones(4, np.int32)}, "OPC_ERR_UNSUPPORTED_DTYPE", "int32"),
    ({2: None}, "OPC_ERR_INVALID_ARGUMENT", "required input 2 (G) is missing"),
])
def test_malformed_inputs_are_rejected(lib, change, status, words):
    ins = [np.array([0.1], np.float32), np.ones(4, np.float32), np.ones(4, np.float32)]
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run("SGDOptimizer", ins)
    assert e.value.status_name == status and words in e.value.message, e.value.message


@pytest.mark.parametrize("offset", [0, 1, 5])
def test_large_tensors_stream_the_same_bits(lib, rng, offset):
    """Past 2^20 elements the avx512 build writes both outputs with streaming stores after a scalar head: the same
    bits as the formula, NaN canonical, whatever the buffers' alignment and thread count."""
    n = (1 << 20) + 4099
    w = rng.normal(0, 1, n + offset).astype(np.float32)[offset:]
    g = rng.normal(0, 1, n + offset).astype(np.float32)[offset:]
    w[::1001], g[::997] = -np.nan, np.nan
    eta = np.array([0.01], np.float32)
    d = -np.float64(eta[0]) * g.astype(np.float64)
    want_w = (w.astype(np.float64) + d).astype(np.float32)
    outs = [lib.run("SGDOptimizer", [eta, w, g], threads=t) for t in (1, 3)]
    for nw, ng in outs:
        np.testing.assert_array_equal(nw, want_w)
        np.testing.assert_array_equal(ng, d.astype(np.float32))
        assert nw.tobytes() == outs[0][0].tobytes() and ng.tobytes() == outs[0][1].tobytes()
    single = lib.run("SGDOptimizer", [eta, w, g], want_outputs=[True, False])[0]
    assert single.tobytes() == outs[0][0].tobytes()
