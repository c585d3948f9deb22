"""GRUTraining / GRUGrad of the C library against a float64 NumPy GRU and its finite differences."""
from __future__ import annotations

import numpy as np
import pytest


def sig(a):
    return 1 / (1 + np.exp(-a))


def gru_forward(X, W, R, B=None, H0=None, lbr=0, reverse=False, clip=None):
    """ONNX GRU-14 (one direction, gates z, r, h) in float64: (HAll, Ht, ZRH)."""
    X, W, R = (np.asarray(a, np.float64) for a in (X, W, R))
    S, nb, _ = X.shape
    H = R.shape[-1]
    w, r_, b = W[0], R[0], (np.zeros(6 * H) if B is None else np.asarray(B, np.float64)[0])
    h = np.zeros((nb, H)) if H0 is None else np.asarray(H0, np.float64)[0]
    c = (lambda a: a) if clip is None else (lambda a: np.clip(a, -clip, clip))
    hall, zrh = np.zeros((S, 1, nb, H)), np.zeros((S, 1, nb, 3 * H))
    for t in (reversed(range(S)) if reverse else range(S)):
        x = X[t]
        z = sig(c(x @ w[:H].T + h @ r_[:H].T + b[:H] + b[3 * H:4 * H]))
        r = sig(c(x @ w[H:2 * H].T + h @ r_[H:2 * H].T + b[H:2 * H] + b[4 * H:5 * H]))
        if lbr:
            hh = np.tanh(c(x @ w[2 * H:].T + r * (h @ r_[2 * H:].T + b[5 * H:]) + b[2 * H:3 * H]))
        else:
            hh = np.tanh(c(x @ w[2 * H:].T + (r * h) @ r_[2 * H:].T + b[5 * H:] + b[2 * H:3 * H]))
        h = (1 - z) * hh + z * h
        hall[t, 0] = h
        zrh[t, 0] = np.concatenate([z, r, hh], axis=1)
    return hall, h[None], zrh


def numeric_grads(params, names, ghall, ght, **kw):
    """Central differences of L = <HAll, gHAll> + <Ht, gHt> w.r.t. every present parameter."""
    def loss(p):
        hall, ht, _ = gru_forward(**p, **kw)
        return float((hall * ghall).sum() + (ht * ght).sum())
    out = {}
    for n in names:
        if params.get(n) is None:
            continue
        base = params[n]
        g = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            eps = 1e-6 * max(1.0, abs(base[i]))
            p = dict(params)
            up, dn = base.copy(), base.copy()
            up[i] += eps
            dn[i] -= eps
            p[n] = up
            lu = loss(p)
            p[n] = dn
            g[i] = (lu - loss(p)) / (2 * eps)
        out[n] = g
    return out


def make(rng, S=3, nb=2, I=3, H=4, bias=True, h0=True):
    return {
        "X": rng.normal(size=(S, nb, I)),
        "W": rng.normal(0, 0.6, size=(1, 3 * H, I)),
        "R": rng.normal(0, 0.6, size=(1, 3 * H, H)),
        "B": rng.normal(0, 0.5, size=(1, 6 * H)) if bias else None,
        "H0": rng.normal(0, 0.8, size=(1, nb, H)) if h0 else None,
    }


def lib_inputs(p, dtype, extra=()):
    cast = lambda a: None if a is None else np.asarray(a).astype(dtype)  # noqa: E731
    return [cast(p["X"]), cast(p["W"]), cast(p["R"]), cast(p["B"]), None, cast(p["H0"]), *[cast(e) for e in extra]]


def attrs_of(H, lbr, reverse, clip):
    a = {"hidden_size": H, "linear_before_reset": lbr}
    if reverse:
        a["direction"] = "reverse"
    if clip is not None:
        a["clip"] = clip
    return a


VARIANTS = [  # (lbr, reverse, clip, bias, h0)
    (0, False, None, True, True), (1, False, None, True, True), (0, False, None, False, False),
    (1, False, None, False, True), (0, True, None, True, True), (1, True, None, True, False),
    (0, False, 0.9, True, True), (1, False, 0.9, True, True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lbr,reverse,clip,bias,h0", VARIANTS)
def test_forward(lib, rng, lbr, reverse, clip, bias, h0, dtype):
    p = make(rng, S=4, nb=3, I=5, H=6, bias=bias, h0=h0)
    q = {k: (None if v is None else v.astype(dtype).astype(np.float64)) for k, v in p.items()}
    hall, ht, zrh = lib.run("GRUTraining", lib_inputs(p, dtype), attrs_of(6, lbr, reverse, clip), threads=2)
    e = gru_forward(q["X"], q["W"], q["R"], q["B"], q["H0"], lbr=lbr, reverse=reverse, clip=clip)
    tol = 2e-6 if dtype == np.float32 else 1e-13
    for a, r, n in zip((hall, ht, zrh), e, ("HAll", "Ht", "ZRH")):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, r, atol=tol, rtol=tol, err_msg=n)
    if clip is not None:  # the clip must have been active somewhere for the case to mean anything
        unclipped = gru_forward(q["X"], q["W"], q["R"], q["B"], q["H0"], lbr=lbr, reverse=reverse)
        assert np.abs(unclipped[2] - e[2]).max() > 1e-3


@pytest.mark.parametrize("lbr,reverse,clip,bias,h0", VARIANTS)
@pytest.mark.parametrize("grads", ["both", "hall_only", "ht_only"])
def test_backward_vs_finite_differences(lib, rng, lbr, reverse, clip, bias, h0, grads):
    H = 4
    p = make(rng, S=3, nb=2, I=3, H=H, bias=bias, h0=h0)
    hall, ht, zrh = gru_forward(p["X"], p["W"], p["R"], p["B"], p["H0"], lbr=lbr, reverse=reverse, clip=clip)
    ghall = rng.normal(size=hall.shape) if grads != "ht_only" else np.zeros(hall.shape)
    ght = rng.normal(size=ht.shape) if grads != "hall_only" else np.zeros(ht.shape)
    num = numeric_grads(p, ["X", "W", "R", "B", "H0"], ghall, ght, lbr=lbr, reverse=reverse, clip=clip)
    extra = (hall, zrh, ghall if grads != "ht_only" else None, ght if grads != "hall_only" else None)
    for dtype, tol in ((np.float64, 2e-7), (np.float32, 5e-5)):
        dx, dw, dr, db, dh0 = lib.run("GRUGrad", lib_inputs(p, dtype, extra), attrs_of(H, lbr, reverse, clip))
        assert dx.shape == p["X"].shape and dw.shape == p["W"].shape and dr.shape == p["R"].shape
        assert db.shape == (1, 6 * H) and dh0.shape == (1, 2, H)
        np.testing.assert_allclose(dx, num["X"], atol=tol, err_msg="dX")
        np.testing.assert_allclose(dw, num["W"], atol=tol, err_msg="dW")
        np.testing.assert_allclose(dr, num["R"], atol=tol, err_msg="dR")
        if bias:
            np.testing.assert_allclose(db, num["B"], atol=tol, err_msg="dB")
        if h0:
            np.testing.assert_allclose(dh0, num["H0"], atol=tol, err_msg="dH0")


@pytest.mark.parametrize("lbr", [0, 1])
def test_own_saved_activations_roundtrip(lib, rng, lbr):
    """GRUGrad fed by the library's own GRUTraining equals GRUGrad fed by the NumPy forward."""
    p = make(rng, S=5, nb=3, I=4, H=5)
    ins = lib_inputs(p, np.float64)
    hall, ht, zrh = lib.run("GRUTraining", ins, {"hidden_size": 5, "linear_before_reset": lbr})
    g = rng.normal(size=hall.shape)
    mine = lib.run("GRUGrad", ins + [hall, zrh, g, None], {"hidden_size": 5, "linear_before_reset": lbr})
    e = gru_forward(p["X"], p["W"], p["R"], p["B"], p["H0"], lbr=lbr)
    theirs = lib.run("GRUGrad", ins + [e[0], e[2], g, None], {"hidden_size": 5, "linear_before_reset": lbr})
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_output_subsets_and_threads(lib, rng):
    p = make(rng, S=6, nb=40, I=16, H=300)  # big enough for the threaded gate loops
    ins = lib_inputs(p, np.float32)
    attrs = {"hidden_size": 300}
    hall, ht, zrh = lib.run("GRUTraining", ins, attrs, threads=1)
    hall2, ht2, zrh2 = lib.run("GRUTraining", ins, attrs, threads=2)
    for a, b in ((hall, hall2), (ht, ht2), (zrh, zrh2)):  # fixed column blocks: bitwise across threads
        np.testing.assert_array_equal(b, a)
    only_ht = lib.run("GRUTraining", ins, attrs, want_outputs=[False, True, False], threads=2)
    assert only_ht[0] is None and only_ht[2] is None
    np.testing.assert_array_equal(only_ht[1], ht2)
    g = rng.normal(size=hall.shape).astype(np.float32)
    full = lib.run("GRUGrad", ins + [hall, zrh, g, None], attrs, threads=2)
    for i in range(5):
        want = [k == i for k in range(5)]
        part = lib.run("GRUGrad", ins + [hall, zrh, g, None], attrs, want_outputs=want, threads=2)
        np.testing.assert_array_equal(part[i], full[i])
    one = lib.run("GRUGrad", ins + [hall, zrh, g, None], attrs, threads=1)
    for a, b in zip(one, full):
        np.testing.assert_array_equal(a, b)


def test_sequence_lens_all_full_accepted(lib, rng):
    p = make(rng)
    ins = lib_inputs(p, np.float64)
    base = lib.run("GRUTraining", ins, {"hidden_size": 4})
    ins[4] = np.full(2, 3, np.int32)
    same = lib.run("GRUTraining", ins, {"hidden_size": 4, "activations": ["Sigmoid", "Tanh"]})
    for a, b in zip(base, same):
        np.testing.assert_array_equal(a, b)


def test_empty_sequence_and_batch(lib, rng):
    p = make(rng, S=0, nb=2)
    ins = lib_inputs(p, np.float32)
    hall, ht, zrh = lib.run("GRUTraining", ins, {"hidden_size": 4})
    assert hall.shape == (0, 1, 2, 4) and zrh.shape == (0, 1, 2, 12)
    np.testing.assert_array_equal(ht, ins[5])
    ght = rng.normal(size=(1, 2, 4)).astype(np.float32)
    dx, dw, dr, db, dh0 = lib.run("GRUGrad", ins + [hall, zrh, None, ght], {"hidden_size": 4})
    assert dx.shape == (0, 2, 3) and not dw.any() and not dr.any() and not db.any()
    np.testing.assert_array_equal(dh0, ght)
    p = make(rng, S=3, nb=0)
    ins = lib_inputs(p, np.float32)
    hall, ht, zrh = lib.run("GRUTraining", ins, {"hidden_size": 4})
    assert hall.shape == (3, 1, 0, 4)
    outs = lib.run("GRUGrad", ins + [hall, zrh, None, None], {"hidden_size": 4})
    assert not outs[1].any() and outs[0].shape == (3, 0, 3)


# ---- directions, activations, sequence_lens ---------------------------------------------------

def make_inputs(rng, S, nb, I, H, D, lens=None):
    """GRU inputs in ONNX order (X, W, R, B, sequence_lens, initial_h), float64, D directions."""
    return [rng.normal(size=(S, nb, I)), rng.normal(0, 0.6, (D, 3 * H, I)), rng.normal(0, 0.6, (D, 3 * H, H)),
            rng.normal(0, 0.6, (D, 6 * H)), None if lens is None else np.array(lens, np.int32),
            rng.normal(size=(D, nb, H))]


def close(got, want, tol, what):
    """Within tol relative to the largest magnitude of want (unbounded activations grow large)."""
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * (1.0 + np.abs(want).max(initial=0.0)), err_msg=what)


FEATURES = [  # attributes besides hidden_size, sequence_lens (None: omitted), for S = 5, batch 4
    ({"direction": "bidirectional"}, None),
    ({"direction": "bidirectional", "linear_before_reset": 1}, [5, 3, 1, 0]),
    ({"direction": "reverse"}, [5, 3, 1, 0]),
    ({"direction": "reverse", "linear_before_reset": 1}, [0, 2, 5, 4]),
    ({}, [5, 3, 1, 0]),
    ({"linear_before_reset": 1, "clip": 0.9}, [2, 5, 0, 4]),
    ({"activations": ["HardSigmoid", "Softsign"]}, None),
    ({"activations": ["Relu", "Tanh"], "clip": 1.2, "linear_before_reset": 1}, None),
    ({"activations": ["Affine", "ScaledTanh"], "activation_alpha": [0.3, 1.5], "activation_beta": [0.4, 0.8]},
     [5, 3, 1, 0]),
    ({"activations": ["LeakyRelu", "Elu"], "activation_alpha": [0.1], "clip": 1.0, "direction": "reverse"},
     [5, 3, 1, 0]),
    ({"activations": ["ThresholdedRelu", "Softplus"], "activation_alpha": [0.2], "clip": 1.0}, None),
    ({"direction": "bidirectional", "activations": ["sigmoid", "tanh", "HARDSIGMOID", "relu"], "clip": 2.0,
      "linear_before_reset": 1}, [1, 5, 0, 3]),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("extra,lens", FEATURES, ids=[f"{i}-{sorted(f[0].items())}-lens={f[1]}" for i, f in enumerate(FEATURES)])
def test_features_match_reference(lib, rng, extra, lens, dtype):
    """GRUTraining and GRUGrad against the float64 references (reference/forward/gru.py, reference/ops/gru_grad.py),
    the saved state and the incoming gradients rounded to dtype for both."""
    from reference.forward.gru import gru_training
    from reference.ops.gru_grad import gru_grad

    H = 4
    D = 2 if extra.get("direction") == "bidirectional" else 1
    ins = make_inputs(rng, 5, 4, 3, H, D, lens)
    attrs = {"hidden_size": H, **extra}
    rounded = [a if a is None or a.dtype == np.int32 else a.astype(dtype) for a in ins]
    exact = [a if a is None or a.dtype == np.int32 else a.astype(np.float64) for a in rounded]
    want = gru_training(*exact, **attrs)
    got = lib.run("GRUTraining", rounded, attrs, threads=2)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for g, w, name in zip(got, want, ("HAll", "Ht", "ZRH")):
        assert g.dtype == dtype and g.shape == w.shape, name
        close(g, w, tol, name)
    for b, n in enumerate(lens or []):  # rows past a length are exactly 0
        assert not got[0][n:, :, b].any() and not got[2][n:, :, b].any()
    saved = [a.astype(dtype) for a in (want[0], want[2], rng.normal(size=want[0].shape), rng.normal(size=want[1].shape))]
    want_g = gru_grad(*exact, *(a.astype(np.float64) for a in saved), **attrs)
    got_g = lib.run("GRUGrad", rounded + saved, attrs, threads=2)
    for g, w, name in zip(got_g, want_g, ("dX", "dW", "dR", "dB", "dH0")):
        assert g.dtype == dtype and g.shape == w.shape, name
        close(g, w, 1e-11 if dtype == np.float64 else 2e-5, name)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lbr", [0, 1])
def test_sequence_lens_equal_truncated_runs(lib, rng, direction, lbr):
    """ONNX semantics, checked without the reference: batch row b of length L gives what X[:L, b] run alone gives (a
    reverse direction starting at step L - 1); its rows past L are 0 in HAll, ZRH and dX, and the weight gradients
    are the sums over the rows' own runs."""
    S, nb, H, lens = 6, 4, 5, [6, 4, 1, 0]
    D = 2 if direction == "bidirectional" else 1
    ins = make_inputs(rng, S, nb, 3, H, D, lens)
    attrs = {"hidden_size": H, "direction": direction, "linear_before_reset": lbr}
    hall, ht, zrh = lib.run("GRUTraining", ins, attrs, threads=2)
    g_hall, g_ht = rng.normal(size=hall.shape), rng.normal(size=ht.shape)
    dx, dw, dr, db, dh0 = lib.run("GRUGrad", ins + [hall, zrh, g_hall, g_ht], attrs, threads=2)
    sums = [np.zeros_like(dw), np.zeros_like(dr), np.zeros_like(db)]
    for b, n in enumerate(lens):
        alone = [ins[0][:n, b:b + 1], ins[1], ins[2], ins[3], None, ins[5][:, b:b + 1]]
        h1, t1, z1 = lib.run("GRUTraining", alone, attrs)
        close(hall[:n, :, b:b + 1], h1, 1e-13, f"HAll row {b}")
        close(zrh[:n, :, b:b + 1], z1, 1e-13, f"ZRH row {b}")
        close(ht[:, b:b + 1], t1, 1e-13, f"Ht row {b}")
        assert not hall[n:, :, b].any() and not zrh[n:, :, b].any()
        g1 = lib.run("GRUGrad", alone + [h1, z1, g_hall[:n, :, b:b + 1], g_ht[:, b:b + 1]], attrs)
        close(dx[:n, b:b + 1], g1[0], 1e-12, f"dX row {b}")
        assert not dx[n:, b].any()
        close(dh0[:, b:b + 1], g1[4], 1e-12, f"dH0 row {b}")
        for acc, part in zip(sums, g1[1:4]):
            acc += part
    for got, acc, name in zip((dw, dr, db), sums, ("dW", "dR", "dB")):
        close(got, acc, 1e-12, name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_thresholded_relu_zero_at_its_threshold(lib, dtype):
    """ONNX ThresholdedRelu passes x only where x > alpha: a z pre-activation of exactly alpha gives 0."""
    H = 2
    B = np.zeros((1, 6 * H), dtype)
    B[0, :H] = [0.5, 0.5 + 2.0 ** -20]  # Wbz: the z pre-activations (X, W, R, initial_h zero)
    ins = [np.zeros((1, 1, 1), dtype), np.zeros((1, 3 * H, 1), dtype), np.zeros((1, 3 * H, H), dtype), B, None,
           np.zeros((1, 1, H), dtype)]
    _, _, zrh = lib.run("GRUTraining", ins, {"hidden_size": H, "activations": ["ThresholdedRelu", "Tanh"],
                                             "activation_alpha": [0.5]})
    assert zrh[0, 0, 0, :H].tolist() == [0.0, 0.5 + 2.0 ** -20]


def test_grad_refuses_negative_alpha_leakyrelu(lib, rng):
    """LeakyRelu with alpha < 0 is not invertible from its saved output: GRUTraining runs it, GRUGrad says why not."""
    ins = make_inputs(rng, 3, 2, 3, 4, 1)
    attrs = {"hidden_size": 4, "activations": ["LeakyRelu", "Tanh"], "activation_alpha": [-0.5]}
    hall, _, zrh = lib.run("GRUTraining", ins, attrs)
    with pytest.raises(lib.KernelError) as e:
        lib.run("GRUGrad", ins + [hall, zrh, None, None], attrs)
    assert e.value.status_name == "OPC_ERR_NOT_IMPLEMENTED" and "not invertible" in e.value.message, e.value


# ---- invalid inputs ---------------------------------------------------------------------------

def _base(rng):
    p = make(rng)
    return lib_inputs(p, np.float32)


BAD = [
    ("direction_bad", {"direction": "sideways"}, None, "INVALID_ATTRIBUTE", "direction 'sideways'"),
    ("activations_unknown", {"activations": ["Swish", "Tanh"]}, None, "INVALID_ATTRIBUTE",
     "activation 'Swish' is not an ONNX RNN activation"),
    ("activations_len", {"activations": ["Sigmoid"]}, None, "INVALID_ATTRIBUTE", "must list 2 functions per direction"),
    ("activations_len_bidi", {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh"]}, None,
     "INVALID_ATTRIBUTE", "4 for 2 direction(s), got 2"),
    ("affine_no_alpha", {"activations": ["Affine", "Tanh"]}, None, "INVALID_ATTRIBUTE",
     "Affine needs an activation_alpha value"),
    ("scaledtanh_no_beta", {"activations": ["Sigmoid", "ScaledTanh"], "activation_alpha": [1.0]}, None,
     "INVALID_ATTRIBUTE", "ScaledTanh needs an activation_beta value"),
    ("hidden_missing", {"hidden_size": None}, None, "INVALID_ATTRIBUTE", "'hidden_size' is required"),
    ("hidden_zero", {"hidden_size": 0}, None, "INVALID_ATTRIBUTE", "hidden_size must be in"),
    ("hidden_mismatch", {"hidden_size": 5}, None, "INVALID_ARGUMENT", "input W must have shape [1, 15, 3]"),
    ("lbr_2", {"linear_before_reset": 2}, None, "INVALID_ATTRIBUTE", "linear_before_reset must be 0 or 1"),
    ("layout_1", {"layout": 1}, None, "NOT_IMPLEMENTED", "layout=1"),
    ("clip_zero", {"clip": 0.0}, None, "INVALID_ATTRIBUTE", "clip must be > 0"),
    ("unknown_attr", {"foo": 1}, None, "UNKNOWN_ATTRIBUTE", "unknown attribute 'foo'"),
    ("seq_lens_negative", {}, (4, np.array([-1, 2], np.int32)), "INVALID_ARGUMENT", "sequence_lens[0] = -1 is outside"),
    ("seq_lens_shape", {}, (4, np.array([3, 2, 1], np.int32)), "INVALID_ARGUMENT", "input sequence_lens must have shape [2]"),
    ("seq_lens_range", {}, (4, np.array([3, 9], np.int32)), "INVALID_ARGUMENT", "outside [0, seq_length=3]"),
    ("seq_lens_dtype", {}, (4, np.array([3, 3], np.int64)), "UNSUPPORTED_DTYPE", "sequence_lens must be int32"),
    ("x_rank2", {}, (0, np.zeros((3, 3), np.float32)), "INVALID_ARGUMENT", "X must have rank 3"),
    ("r_shape", {}, (2, np.zeros((1, 12, 5), np.float32)), "INVALID_ARGUMENT", "input R must have shape [1, 12, 4]"),
    ("b_shape", {}, (3, np.zeros((1, 12), np.float32)), "INVALID_ARGUMENT", "input B must have shape [1, 24]"),
    ("h0_shape", {}, (5, np.zeros((1, 3, 4), np.float32)), "INVALID_ARGUMENT", "input initial_h must have shape [1, 2, 4]"),
    ("w_two_dirs", {}, (1, np.zeros((2, 12, 3), np.float32)), "INVALID_ARGUMENT", "input W must have shape [1, 12, 3]"),
    ("bidi_one_dir", {"direction": "bidirectional"}, None, "INVALID_ARGUMENT", "input W must have shape [2, 12, 3]"),
    ("dtype_mix", {}, (1, np.zeros((1, 12, 3), np.float64)), "UNSUPPORTED_DTYPE", "share one dtype"),
    ("missing_r", {}, (2, None), "INVALID_ARGUMENT", "required input 2 (R) is missing"),
]


@pytest.mark.parametrize("name,attr_over,input_over,status,frag", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("op", ["GRUTraining", "GRUGrad"])
def test_invalid(lib, rng, op, name, attr_over, input_over, status, frag):
    ins = _base(rng)
    if op == "GRUGrad":
        ins += [np.zeros((3, 1, 2, 4), np.float32), np.zeros((3, 1, 2, 12), np.float32), None, None]
    attrs = {"hidden_size": 4, **attr_over}
    attrs = {k: v for k, v in attrs.items() if v is not None}
    if input_over:
        ins[input_over[0]] = input_over[1]
    with pytest.raises(lib.KernelError) as e:
        lib.run(op, ins, attrs)
    assert e.value.status_name == "OPC_ERR_" + status, e.value
    assert frag in e.value.message, e.value.message


@pytest.mark.parametrize("idx,arr,frag", [
    (6, None, "required input 6 (HAll) is missing"),
    (7, np.zeros((3, 1, 2, 8), np.float32), "input ZRH must have shape [3, 1, 2, 12]"),
    (6, np.zeros((3, 2, 4), np.float32), "input HAll must have shape [3, 1, 2, 4]"),
    (8, np.zeros((2, 1, 2, 4), np.float32), "input grad_HAll must have shape [3, 1, 2, 4]"),
    (9, np.zeros((1, 2, 5), np.float32), "input grad_Ht must have shape [1, 2, 4]"),
])
def test_invalid_grad_inputs(lib, rng, idx, arr, frag):
    ins = _base(rng) + [np.zeros((3, 1, 2, 4), np.float32), np.zeros((3, 1, 2, 12), np.float32), None, None]
    ins[idx] = arr
    with pytest.raises(lib.KernelError) as e:
        lib.run("GRUGrad", ins, {"hidden_size": 4})
    assert e.value.status_name == "OPC_ERR_INVALID_ARGUMENT" and frag in e.value.message, e.value.message
