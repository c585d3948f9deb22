"""AdamOptimizer of the C library: one fused step against the float64 formula written out here (both modes, the
bias corrections, unscaling and clipping, the update_signal skip, the float16 copy rounded once), optional outputs,
the same bits at any thread count, and every malformed input rejected with its status."""
from __future__ import annotations

import math

import numpy as np
import pytest

DTYPES = {"float32": np.float32, "float64": np.float64}
RTOL = {"float32": 2 ** -23, "float64": 1e-14}


def _formula(R, T, w, g, m1, m2, ls=None, gn=None, alpha=0.9, beta=0.999, lam=0.0, eps=1e-8, max_norm=1.0,
             bias=1, mode=0):
    """Element by element in Python floats (not the reference module)."""
    eta, step = float(R[0]), int(T[0])
    s = 1.0 if ls is None else float(ls[0])
    d = s
    if gn is not None and float(gn) > s * max_norm:
        d = float(gn) / max_norm
    c1 = 1 - alpha ** step if bias and step > 0 else 1.0
    c2 = 1 - beta ** step if bias and step > 0 else 1.0
    outs = [[], [], [], []]
    for wv, gv, a, b in zip(*(np.asarray(x, np.float64).reshape(-1) for x in (w, g, m1, m2))):
        gg = gv / d
        a2 = alpha * a + (1 - alpha) * gg
        b2 = beta * b + (1 - beta) * gg * gg
        if mode == 0:
            delta = -eta * ((a2 / c1) / (math.sqrt(b2 / c2) + eps) + lam * wv)
        else:
            u = eta * math.sqrt(c2) / c1 * a2 / (math.sqrt(b2) + eps)
            delta = -u - eta * lam * (wv - u)
        for k, v in enumerate((a2, b2, wv + delta, delta)):
            outs[k].append(v)
    return [np.array(o).reshape(np.shape(w)) for o in outs]


def _inputs(rng, dtype, shape=(5, 37), step=3):
    t = DTYPES[dtype]
    return [np.array([0.05], t), np.array([step], np.int64), rng.normal(0, 1, shape).astype(t),
            rng.normal(0, 1, shape).astype(t), rng.normal(0, 0.5, shape).astype(t),
            rng.uniform(0, 1, shape).astype(t)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("bias", [0, 1])
@pytest.mark.parametrize("step", [0, 1, 7])
def test_one_step(lib, rng, dtype, mode, bias, step):
    ins = _inputs(rng, dtype, step=step)
    attrs = {"lambda": 0.01, "weight_decay_mode": mode, "do_bias_correction": bias, "alpha": 0.8, "beta": 0.99}
    nT, m1, m2, nw, ng, mp = lib.run("AdamOptimizer", ins + [None] * 4, attrs, want_outputs=[True] * 5 + [False])
    want = _formula(*ins, alpha=0.8, beta=0.99, lam=0.01, bias=bias, mode=mode)
    assert nT.dtype == np.int64 and int(nT[0]) == step + 1 and mp is None
    for got, exp in zip((m1, m2, nw, ng), want):
        assert got.dtype == ins[2].dtype
        np.testing.assert_allclose(got.astype(np.float64), exp, rtol=RTOL[dtype], atol=1e-300)


@pytest.mark.parametrize("norm, max_norm", [(100.0, 1.0), (3000.0, 1.0), (3000.0, 5.0)])
def test_loss_scale_and_clipping(lib, rng, norm, max_norm):
    ins = _inputs(rng, "float64")
    ls, gn = np.array([1024.0]), np.array(norm)
    got = lib.run("AdamOptimizer", ins + [None, ls, gn, None], {"max_norm_clip": max_norm},
                  want_outputs=[True] * 5 + [False])
    want = _formula(*ins, ls=ls, gn=gn, max_norm=max_norm)
    for g, e in zip(got[1:5], want):
        np.testing.assert_allclose(g, e, rtol=1e-14, atol=1e-300)


def test_skip_passes_every_input_through(lib, rng):
    ins = _inputs(rng, "float32")
    mp = ins[2].astype(np.float16)
    got = lib.run("AdamOptimizer", ins + [mp, np.array([2.0], np.float32), np.array(9.0, np.float32), np.array(False)])
    assert int(got[0][0]) == 3
    for g, e in zip(got[1:], [ins[4], ins[5], ins[2], ins[3], mp]):
        assert g.tobytes() == e.tobytes()


def test_float16_copy_is_rounded_once(lib, rng):
    ins = _inputs(rng, "float64", shape=(4000,))
    got = lib.run("AdamOptimizer", ins + [ins[2].astype(np.float16), None, None, np.array(True)])
    want = _formula(*ins)[2]
    assert got[5].dtype == np.float16
    np.testing.assert_array_equal(got[5], want.astype(np.float16))


@pytest.mark.parametrize("dtype", DTYPES)
def test_thread_counts_give_the_same_bits(lib, rng, dtype):
    ins = _inputs(rng, dtype, shape=(200003,))
    extra = [ins[2].astype(np.float16), np.array([4.0], DTYPES[dtype]), np.array(8.0, DTYPES[dtype]), None]
    outs = [lib.run("AdamOptimizer", ins + extra, {"weight_decay_mode": 1, "lambda": 0.1}, threads=t)
            for t in (1, 2, 3, 4)]
    for o in outs[1:]:
        for a, b in zip(o, outs[0]):
            assert a.tobytes() == b.tobytes()


def test_empty_weights(lib):
    ins = [np.array([0.1]), np.array([1], np.int64)] + [np.ones((2, 0))] * 4
    got = lib.run("AdamOptimizer", ins + [None] * 4)
    assert int(got[0][0]) == 2 and all(g.shape == (2, 0) for g in got[1:])


F = np.float32


@pytest.mark.parametrize("change, attrs, status, words", [
    ({3: np.ones(5, F)}, {}, "OPC_ERR_INVALID_ARGUMENT", "gradients has shape [5] but weights has [4]"),
    ({4: np.ones((4, 1), F)}, {}, "OPC_ERR_INVALID_ARGUMENT", "moment_1 has shape [4, 1]"),
    ({5: np.ones(3, F)}, {}, "OPC_ERR_INVALID_ARGUMENT", "moment_2 has shape [3]"),
    ({6: np.ones(3, np.float16)}, {}, "OPC_ERR_INVALID_ARGUMENT", "mixed_precision_weights has shape [3]"),
    ({6: np.ones(4, F)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "mixed_precision_weights has dtype float32"),
    ({0: np.array([0.1, 0.2], F)}, {}, "OPC_ERR_INVALID_ARGUMENT", "R must hold exactly one value"),
    ({1: np.array([1, 2], np.int64)}, {}, "OPC_ERR_INVALID_ARGUMENT", "T must hold exactly one value"),
    ({1: np.array([1], np.int32)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "T has dtype int32"),
    ({7: np.ones(2, F)}, {}, "OPC_ERR_INVALID_ARGUMENT", "loss_scale must hold exactly one value"),
    ({8: np.ones(2, F)}, {}, "OPC_ERR_INVALID_ARGUMENT", "global_gradient_norm must hold exactly one value"),
    ({9: np.array([True, False])}, {}, "OPC_ERR_INVALID_ARGUMENT", "update_signal must hold exactly one value"),
    ({9: np.array(1.0, F)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "update_signal has dtype float32"),
    ({3: np.ones(4)}, {}, "OPC_ERR_UNSUPPORTED_DTYPE", "all float inputs must share one dtype"),
    ({4: None}, {}, "OPC_ERR_INVALID_ARGUMENT", "required input 4 (moment_1) is missing"),
    ({}, {"weight_decay_mode": 2}, "OPC_ERR_INVALID_ATTRIBUTE", "weight_decay_mode 2 must be 0 or 1"),
    ({}, {"do_bias_correction": 2}, "OPC_ERR_INVALID_ATTRIBUTE", "do_bias_correction 2 must be 0 or 1"),
    ({}, {"alpha": -0.5}, "OPC_ERR_INVALID_ATTRIBUTE", "alpha -0.5 must lie in [0, 1]"),
    ({}, {"beta": 1.5}, "OPC_ERR_INVALID_ATTRIBUTE", "beta 1.5 must lie in [0, 1]"),
    ({}, {"lambda": -1.0}, "OPC_ERR_INVALID_ATTRIBUTE", "lambda -1 must lie in"),
    ({}, {"epsilon": float("nan")}, "OPC_ERR_INVALID_ATTRIBUTE", "epsilon nan must lie in"),
])
def test_malformed_inputs_are_rejected(lib, change, attrs, status, words):
    ins = [np.array([0.1], F), np.array([1], np.int64)] + [np.ones(4, F) for _ in range(4)] + [None] * 4
    for i, value in change.items():
        ins[i] = value
    with pytest.raises(lib.KernelError) as e:
        lib.run("AdamOptimizer", ins, attrs)
    assert e.value.status_name == status and words in e.value.message, e.value.message


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_bits_do_not_depend_on_the_outputs_asked_for(lib, rng, dtype):
    """NaN meets NaN (weights and gradients both NaN): one canonical NaN, whichever loop path and alignment."""
    ins = _inputs(rng, dtype, shape=(301,))
    for k in (2, 3, 4):
        ins[k][::7] = np.nan
    ins[2][1::5] = -np.nan
    full = lib.run("AdamOptimizer", ins + [None] * 4, want_outputs=[True] * 5 + [False])
    for want in ([True, True, True, True, False, False], [True, True, True, False, True, False]):
        sub = lib.run("AdamOptimizer", ins + [None] * 4, want_outputs=want)
        for k in range(5):
            if want[k]:
                assert sub[k].tobytes() == full[k].tobytes()
    with_mp = lib.run("AdamOptimizer", ins + [None] * 4)
    for k in range(5):
        assert with_mp[k].tobytes() == full[k].tobytes()
