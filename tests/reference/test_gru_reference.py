"""Proofs for the GRU forward (GRUTraining) and GRUGrad references (float64, fixed seeds).

Forward: equal to onnx.reference's GRU (Y, Y_h) and to a naive per-sample loop written here from the
ONNX equations (which also covers clip and sequence_lens, and yields the raw pre-activations).
Backward: the vector-Jacobian identity against central differences of the forward, over all inputs.
Mutated references (swapped gates, wrong linear_before_reset, a one-step shift in the saved state) fail.
"""
import numpy as np
import onnx_oracle  # onnx.reference, with the gaps of the pinned onnx releases filled (tests/reference)
import pytest

from reference.forward.gru import gru_check, gru_training
from reference.ops.gru_grad import gru_grad


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def naive_gru(X, W, R, B, lens, H0, *, H, lbr, reverse=False, clip=None):
    """One direction, one batch entry and one step at a time, straight from the ONNX GRU equations.

    Returns Y [S, B, H], Y_h [B, H], the gates [S, B, 3H] and the unclipped pre-activations [S, B, 3H].
    """
    S, Bn, _ = X.shape
    Wz, Wr, Wh = W[:H], W[H:2 * H], W[2 * H:]
    Rz, Rr, Rh = R[:H], R[H:2 * H], R[2 * H:]
    Wbz, Wbr, Wbh, Rbz, Rbr, Rbh = (B[k * H:(k + 1) * H] for k in range(6))
    c = (lambda a: a) if clip is None else (lambda a: np.clip(a, -clip, clip))
    Y, gates, pre = np.zeros((S, Bn, H)), np.zeros((S, Bn, 3 * H)), np.zeros((S, Bn, 3 * H))
    Yh = np.zeros((Bn, H))
    for b in range(Bn):
        h = H0[b]
        steps = range(lens[b] - 1, -1, -1) if reverse else range(lens[b])
        for t in steps:
            x = X[t, b]
            az = Wz @ x + Rz @ h + Wbz + Rbz
            ar = Wr @ x + Rr @ h + Wbr + Rbr
            z, r = sig(c(az)), sig(c(ar))
            if lbr:
                ah = Wh @ x + r * (Rh @ h + Rbh) + Wbh
            else:
                ah = Wh @ x + Rh @ (r * h) + Rbh + Wbh
            hc = np.tanh(c(ah))
            h = (1 - z) * hc + z * h
            Y[t, b] = h
            gates[t, b] = np.concatenate([z, r, hc])
            pre[t, b] = np.concatenate([az, ar, ah])
        Yh[b] = h
    return Y, Yh, gates, pre


def make_case(seed, S=4, Bn=3, I=2, H=5, D=1, bias=True, h0=True, scale=0.6):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(S, Bn, I))
    W = scale * rng.normal(size=(D, 3 * H, I))
    R = scale * rng.normal(size=(D, 3 * H, H))
    B = scale * rng.normal(size=(D, 6 * H)) if bias else None
    H0 = rng.normal(size=(D, Bn, H)) if h0 else None
    return X, W, R, B, H0


def attrs(H, direction="forward", lbr=0, clip=None, activations=None, alpha=None, beta=None):
    return dict(hidden_size=H, direction=direction, activations=activations, activation_alpha=alpha,
                activation_beta=beta, clip=clip, linear_before_reset=lbr)


def vjp_gap(grad_fn, X, W, R, B, lens, H0, kw, gY, gH, seed, eps=1e-6, zrh_transform=None):
    """Relative gap of <grads, tangents> vs <(gY, gH), central difference of (HAll, Ht)> over X, W, R, B, H0."""
    HAll, Ht, ZRH = gru_training(X, W, R, B, lens, H0, **kw)
    if zrh_transform:
        ZRH = zrh_transform(ZRH)
    grads = grad_fn(X, W, R, B, lens, H0, HAll, ZRH, gY, gH, **kw)
    D, Bn, H = Ht.shape
    full_B = np.zeros((D, 6 * H)) if B is None else B
    full_H0 = np.zeros((D, Bn, H)) if H0 is None else H0
    rng = np.random.default_rng(seed + 100)
    primals = (X, W, R, full_B, full_H0)
    tangents = [rng.normal(size=p.shape) for p in primals]
    lhs = sum(np.vdot(g, t) for g, t in zip(grads, tangents))

    def along(s):
        p = [v + s * t for v, t in zip(primals, tangents)]
        HA, HT, _ = gru_training(p[0], p[1], p[2], p[3], lens, p[4], **kw)
        return (0.0 if gY is None else np.vdot(HA, gY)) + (0.0 if gH is None else np.vdot(HT, gH))

    rhs = (along(eps) - along(-eps)) / (2 * eps)
    scale = sum(np.linalg.norm(g) * np.linalg.norm(t) for g, t in zip(grads, tangents))
    return abs(lhs - rhs) / scale


def cotangents(seed, S, D, Bn, H, which):
    rng = np.random.default_rng(seed + 7)
    gY = rng.normal(size=(S, D, Bn, H)) if which in ("HAll", "both") else None
    gH = rng.normal(size=(D, Bn, H)) if which in ("Ht", "both") else None
    return gY, gH


# (name, case kwargs, attribute kwargs, sequence_lens, which cotangents)
GRAD_CONFIGS = [
    ("basic", {}, {}, None, "both"),
    ("lbr1", {}, {"lbr": 1}, None, "both"),
    ("no_h0", {"h0": False}, {}, None, "both"),
    ("no_bias", {"bias": False}, {"lbr": 1}, None, "both"),
    ("no_bias_no_h0", {"bias": False, "h0": False}, {}, None, "both"),
    ("hall_only", {}, {}, None, "HAll"),
    ("ht_only", {}, {"lbr": 1}, None, "Ht"),
    ("ht_only_no_h0", {"h0": False}, {}, None, "Ht"),
    ("seq1", {"S": 1}, {}, None, "both"),
    ("seq1_lbr1_ht", {"S": 1}, {"lbr": 1}, None, "Ht"),
    ("batch1", {"Bn": 1}, {}, None, "both"),
    ("batch1_lbr1", {"Bn": 1, "S": 6}, {"lbr": 1}, None, "HAll"),
    ("hidden3", {"H": 3, "I": 4}, {}, None, "both"),
    ("hidden7", {"H": 7, "I": 3}, {"lbr": 1}, None, "both"),
    ("hidden1", {"H": 1, "I": 1}, {}, None, "both"),
    ("long_seq", {"S": 12, "H": 3}, {"lbr": 1}, None, "both"),
    ("reverse", {}, {"direction": "reverse"}, None, "both"),
    ("reverse_lbr1_no_h0", {"h0": False}, {"direction": "reverse", "lbr": 1}, None, "HAll"),
    ("bidirectional", {"D": 2}, {"direction": "bidirectional"}, None, "both"),
    ("bidirectional_lbr1", {"D": 2, "bias": False}, {"direction": "bidirectional", "lbr": 1}, None, "Ht"),
    ("clip", {"scale": 1.5}, {"clip": 0.85}, None, "both"),
    ("clip_lbr1_reverse", {"scale": 1.5}, {"clip": 1.1, "lbr": 1, "direction": "reverse"}, None, "both"),
    ("seq_lens", {"S": 5, "Bn": 4}, {}, [5, 3, 1, 0], "both"),
    ("seq_lens_lbr1", {"S": 5, "Bn": 4}, {"lbr": 1}, [2, 5, 0, 4], "both"),
    ("seq_lens_reverse", {"S": 5, "Bn": 4}, {"direction": "reverse"}, [5, 3, 1, 0], "both"),
    ("seq_lens_bidirectional", {"S": 5, "Bn": 3, "D": 2}, {"direction": "bidirectional", "lbr": 1},
     [4, 5, 2], "both"),
    ("activations", {}, {"activations": ["HardSigmoid", "Softsign"], "alpha": [0.3], "beta": [0.45]}, None, "both"),
    ("activations_more", {}, {"activations": ["Affine", "ScaledTanh"], "alpha": [0.4, 1.7], "beta": [0.5, 0.6]},
     None, "both"),
    ("activations_bidirectional", {"D": 2},
     {"direction": "bidirectional", "activations": ["sigmoid", "Elu", "softplus", "LeakyRelu"]}, None, "both"),
]


def run_grad_config(config, seed, grad_fn=gru_grad, zrh_transform=None):
    name, ck, ak, lens, which = config
    X, W, R, B, H0 = make_case(seed, **ck)
    S, Bn, _ = X.shape
    D, H = W.shape[0], R.shape[2]
    kw = attrs(H, **ak)
    gY, gH = cotangents(seed, S, D, Bn, H, which)
    lens = None if lens is None else np.array(lens, dtype=np.int32)
    return vjp_gap(grad_fn, X, W, R, B, lens, H0, kw, gY, gH, seed, zrh_transform=zrh_transform)


@pytest.mark.parametrize("config", GRAD_CONFIGS, ids=[c[0] for c in GRAD_CONFIGS])
def test_vjp_identity(config):
    for seed in (0, 1):
        assert run_grad_config(config, seed) < 1e-8


def test_clip_cases_clip_and_stay_away_from_the_kink():
    """The clip configurations clip, and no pre-activation lies within 5e-3 of +-clip.

    The finite-difference steps (eps 1e-6) move pre-activations by far less, so none crosses the kink.
    """
    for name in ("clip", "clip_lbr1_reverse"):
        _, ck, ak, _, _ = next(c for c in GRAD_CONFIGS if c[0] == name)
        for seed in (0, 1):
            X, W, R, B, H0 = make_case(seed, **ck)
            S, Bn, _ = X.shape
            H = R.shape[2]
            _, _, _, pre = naive_gru(X, W[0], R[0], B[0], [S] * Bn, H0[0], H=H, lbr=ak.get("lbr", 0),
                                     reverse=ak.get("direction") == "reverse", clip=ak["clip"])
            assert np.mean(np.abs(pre) > ak["clip"]) > 0.1
            assert np.min(np.abs(np.abs(pre) - ak["clip"])) > 5e-3


# --- forward --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("bias, h0", [(True, True), (False, False), (True, False)])
def test_forward_matches_onnx_reference(direction, lbr, bias, h0):
    D = 2 if direction == "bidirectional" else 1
    X, W, R, B, H0 = make_case(3, S=5, Bn=3, I=4, H=7, D=D, bias=bias, h0=h0)
    feeds = {"X": X, "W": W, "R": R, **({"B": B} if bias else {}), **({"H0": H0} if h0 else {})}
    Y, Y_h, _ = onnx_oracle.rnn("GRU", ["X", "W", "R", "B" if bias else "", "", "H0" if h0 else ""], feeds,
                                direction, hidden_size=7, linear_before_reset=lbr)
    HAll, Ht, ZRH = gru_training(X, W, R, B, None, H0, **attrs(7, direction, lbr))
    assert HAll.shape == (5, D, 3, 7) and Ht.shape == (D, 3, 7) and ZRH.shape == (5, D, 3, 21)
    np.testing.assert_allclose(HAll, Y, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(Ht, Y_h, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("clip, lens", [(None, None), (0.9, None), (None, [4, 1, 0, 3]), (1.2, [2, 4, 3, 4])])
def test_forward_and_zrh_match_naive_loop(lbr, reverse, clip, lens):
    X, W, R, B, H0 = make_case(8, S=4, Bn=4, I=3, H=5, scale=1.3)
    lens_arr = None if lens is None else np.array(lens, dtype=np.int32)
    HAll, Ht, ZRH = gru_training(X, W, R, B, lens_arr, H0,
                                 **attrs(5, "reverse" if reverse else "forward", lbr, clip))
    Y, Yh, gates, _ = naive_gru(X, W[0], R[0], B[0], lens or [4] * 4, H0[0], H=5, lbr=lbr, reverse=reverse,
                                clip=clip)
    np.testing.assert_allclose(HAll[:, 0], Y, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(Ht[0], Yh, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(ZRH[:, 0], gates, rtol=1e-13, atol=1e-13)


def test_sequence_lens_zero_keeps_initial_state():
    X, W, R, B, H0 = make_case(2, S=3, Bn=2)
    HAll, Ht, ZRH = gru_training(X, W, R, B, np.array([0, 3]), H0, **attrs(5))
    assert not HAll[:, 0, 0].any() and not ZRH[:, 0, 0].any()
    np.testing.assert_array_equal(Ht[0, 0], H0[0, 0])


def test_empty_sequence():
    X, W, R, B, H0 = make_case(2, S=0, Bn=2)
    HAll, Ht, ZRH = gru_training(X, W, R, B, None, H0, **attrs(5))
    assert HAll.shape == (0, 1, 2, 5) and ZRH.shape == (0, 1, 2, 15)
    np.testing.assert_array_equal(Ht, H0)
    gH = np.ones((1, 2, 5))
    dX, dW, dR, dB, dH0 = gru_grad(X, W, R, B, None, H0, HAll, ZRH, None, gH, **attrs(5))
    assert dX.shape == (0, 2, 2) and not dW.any() and not dR.any() and not dB.any()
    np.testing.assert_array_equal(dH0, gH)


def test_omitted_inputs_are_zeros():
    X, W, R, B, H0 = make_case(4)
    zeros_B, zeros_H0 = np.zeros_like(B), np.zeros_like(H0)
    kw = attrs(5, lbr=1)
    omitted = gru_training(X, W, R, None, None, None, **kw)
    explicit = gru_training(X, W, R, zeros_B, None, zeros_H0, **kw)
    for a, b in zip(omitted, explicit):
        np.testing.assert_array_equal(a, b)
    HAll, Ht, ZRH = explicit
    g_omitted = gru_grad(X, W, R, None, None, None, HAll, ZRH, None, np.ones_like(Ht), **kw)
    g_explicit = gru_grad(X, W, R, zeros_B, None, zeros_H0, HAll, ZRH, np.zeros_like(HAll), np.ones_like(Ht), **kw)
    for a, b in zip(g_omitted, g_explicit):
        np.testing.assert_array_equal(a, b)


def test_grad_shapes_and_zero_cotangent():
    X, W, R, B, H0 = make_case(5, S=3, Bn=2, I=4, H=3)
    HAll, Ht, ZRH = gru_training(X, W, R, B, None, H0, **attrs(3))
    grads = gru_grad(X, W, R, B, None, H0, HAll, ZRH, np.zeros_like(HAll), None, **attrs(3))
    assert [g.shape for g in grads] == [(3, 2, 4), (1, 9, 4), (1, 9, 3), (1, 18), (1, 2, 3)]
    assert not any(g.any() for g in grads)


def test_grad_reads_the_saved_state():
    """Given other HAll / ZRH than the forward's, the gradient changes: they are used, not recomputed."""
    X, W, R, B, H0 = make_case(6)
    kw = attrs(5)
    HAll, Ht, ZRH = gru_training(X, W, R, B, None, H0, **kw)
    gH = np.ones_like(Ht)
    base = gru_grad(X, W, R, B, None, H0, HAll, ZRH, None, gH, **kw)
    for other in (dict(HAll=HAll * 1.01, ZRH=ZRH), dict(HAll=HAll, ZRH=ZRH * 0.99)):
        moved = gru_grad(X, W, R, B, None, H0, other["HAll"], other["ZRH"], None, gH, **kw)
        assert max(np.abs(a - b).max() for a, b in zip(base, moved)) > 1e-4


def test_inputs_are_not_mutated():
    X, W, R, B, H0 = make_case(7)
    kw = attrs(5, lbr=1)
    HAll, Ht, ZRH = gru_training(X, W, R, B, None, H0, **kw)
    gY = np.ones_like(HAll)
    arrays = (X, W, R, B, H0, HAll, ZRH, gY)
    copies = [a.copy() for a in arrays]
    gru_grad(X, W, R, B, None, H0, HAll, ZRH, gY, None, **kw)
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)


# --- the checks can fail: mutated references ------------------------------------------------------------

def swap_zr(ZRH):
    H = ZRH.shape[-1] // 3
    return np.concatenate([ZRH[..., H:2 * H], ZRH[..., :H], ZRH[..., 2 * H:]], axis=-1)


def grad_with_wrong_lbr(*args, linear_before_reset, **kw):
    return gru_grad(*args, linear_before_reset=1 - linear_before_reset, **kw)


def grad_with_shifted_state(X, W, R, B, lens, H0, HAll, ZRH, gY, gH, **kw):
    # Reads H_t where H_{t-1} belongs: a saved-state layout off by one step.
    shifted = np.concatenate([HAll[1:], HAll[-1:]], axis=0)
    return gru_grad(X, W, R, B, lens, H0, shifted, ZRH, gY, gH, **kw)


def grad_ignoring_seq_lens(X, W, R, B, lens, H0, HAll, ZRH, gY, gH, **kw):
    return gru_grad(X, W, R, B, None, H0, HAll, ZRH, gY, gH, **kw)


@pytest.mark.parametrize("names, grad_fn, zrh_transform", [
    (["basic", "lbr1", "reverse"], gru_grad, swap_zr),
    (["basic", "lbr1", "hall_only"], grad_with_wrong_lbr, None),
    (["basic", "lbr1", "no_h0"], grad_with_shifted_state, None),
    (["seq_lens", "seq_lens_reverse"], grad_ignoring_seq_lens, None),
])
def test_vjp_identity_catches_mutants(names, grad_fn, zrh_transform):
    for name in names:
        config = next(c for c in GRAD_CONFIGS if c[0] == name)
        # The references pass at < 1e-8 (observed <= 2e-11); every mutant misses by orders of magnitude.
        assert run_grad_config(config, 0, grad_fn, zrh_transform) > 1e-5, name


def test_forward_check_catches_swapped_gate_order():
    X, W, R, B, H0 = make_case(9)
    Y, Yh, _, _ = naive_gru(X, W[0], R[0], B[0], [4] * 3, H0[0], H=5, lbr=0)
    perm = np.r_[5:10, 0:5, 10:15]  # r, z, h instead of z, r, h
    HAll, _, _ = gru_training(X, W[:, perm], R[:, perm], B[:, np.r_[perm, 15 + perm]], None, H0, **attrs(5))
    assert np.abs(HAll[:, 0] - Y).max() > 1e-2


# --- validation -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes, attr_over, words", [
    ({"W": (1, 12, 2)}, {}, "W shape [1, 12, 2] != [1, 15, 2]"),
    ({"R": (1, 15, 4)}, {}, "R shape"),
    ({"B": (1, 15)}, {}, "B shape"),
    ({"initial_h": (1, 2, 5)}, {}, "initial_h shape"),
    ({"sequence_lens": (2,)}, {}, "sequence_lens shape"),
    ({"HAll": (4, 1, 3, 4)}, {}, "HAll shape"),
    ({"ZRH": (4, 1, 3, 5)}, {}, "ZRH shape"),
    ({"X": (4, 3)}, {}, "X shape"),
    ({}, {"hidden_size": 0}, "hidden_size=0"),
    ({}, {"direction": "Forward"}, "direction='Forward'"),
    ({}, {"linear_before_reset": 2}, "linear_before_reset=2"),
    ({}, {"clip": 0.0}, "clip=0.0"),
    ({}, {"activations": ["sigmoid"]}, "activations has 1 entries"),
    ({}, {"activations": ["sigmoid", "gelu"]}, "activation 'gelu'"),
    ({}, {"activations": ["Affine", "tanh"]}, "needs an activation_alpha"),
    ({"W": (2, 15, 2), "R": (2, 15, 5)}, {}, "W shape"),
])
def test_gru_check_names_the_problem(shapes, attr_over, words):
    base = {"X": (4, 3, 2), "W": (1, 15, 2), "R": (1, 15, 5), "B": (1, 30), "initial_h": (1, 3, 5)}
    base.update(shapes)
    kw = dict(attrs(5), **attr_over)
    message = gru_check(base, kw)
    assert message is not None and words in message, message


def test_alpha_beta_consumed_in_order_by_the_functions_that_take_them():
    X, W, R, B, H0 = make_case(2)
    kw = attrs(5, activations=["HardSigmoid", "Affine"], alpha=[0.3, 0.8, 9.0], beta=[0.4, 0.1, 9.0])
    got = gru_training(X, W, R, B, None, H0, **kw)
    # The same GRU with the values bound explicitly: leftovers (9.0) change nothing.
    same = gru_training(X, W, R, B, None, H0, **dict(kw, activation_alpha=[0.3, 0.8], activation_beta=[0.4, 0.1]))
    other = gru_training(X, W, R, B, None, H0, **dict(kw, activation_alpha=[0.8, 0.3], activation_beta=[0.4, 0.1]))
    np.testing.assert_array_equal(got[0], same[0])
    assert np.abs(got[0] - other[0]).max() > 1e-3
    # z of the first unit at step 0 is HardSigmoid(alpha 0.3, beta 0.4) of its pre-activation.
    pre = X[0, 0] @ W[0, 0] + H0[0, 0] @ R[0, 0] + B[0, 0] + B[0, 15]
    assert got[2][0, 0, 0, 0] == pytest.approx(np.clip(0.3 * pre + 0.4, 0.0, 1.0), rel=1e-14)
    # Sigmoid and Tanh take no values: alpha/beta given with the defaults change nothing.
    plain = gru_training(X, W, R, B, None, H0, **attrs(5))
    ignored = gru_training(X, W, R, B, None, H0, **attrs(5, alpha=[0.5], beta=[2.0]))
    np.testing.assert_array_equal(plain[0], ignored[0])


def test_thresholded_relu_is_zero_at_its_threshold():
    """ONNX ThresholdedRelu (and onnxruntime's RNN activation) pass x only where x > alpha: z of a unit whose
    pre-activation is exactly alpha is 0, just above it is the pre-activation."""
    H = 2
    X, W, R, H0 = np.zeros((1, 1, 1)), np.zeros((1, 3 * H, 1)), np.zeros((1, 3 * H, H)), np.zeros((1, 1, H))
    B = np.zeros((1, 6 * H))
    B[0, :H] = [0.5, 0.5 + 2.0 ** -20]  # Wbz: the z pre-activations
    _, _, ZRH = gru_training(X, W, R, B, None, H0, **attrs(H, activations=["ThresholdedRelu", "Tanh"], alpha=[0.5]))
    assert ZRH[0, 0, 0, :H].tolist() == [0.0, 0.5 + 2.0 ** -20]


def test_gru_training_rejects_bad_sequence_lens():
    X, W, R, B, H0 = make_case(1)
    with pytest.raises(ValueError, match="sequence_lens"):
        gru_training(X, W, R, B, np.array([1, 5, 2]), H0, **attrs(5))
