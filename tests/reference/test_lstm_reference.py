"""Proofs for the LSTM forward (LSTMTraining) and LSTMGrad references (float64, fixed seeds).

Forward: equal to torch.nn.LSTM (default configuration, both directions), to onnx.reference's LSTM
(peepholes included) and to a naive per-sample loop written here from the ONNX equations, which also covers
clip, input_forget, sequence_lens, reverse / bidirectional and other activations.
Backward: the vector-Jacobian identity against central differences of the forward, over every input,
for each feature; dP at P = 0 and dB (neither B nor P is an LSTMGrad input) are checked on their own.
Mutated references (IOFC in another gate order, a one-step shift in the saved cell state) fail.
"""
import numpy as np
import onnx_oracle  # onnx.reference, with the gaps of the pinned onnx releases filled (tests/reference)
import pytest

from reference.forward.gru import ACTIVATIONS
from reference.forward.lstm import lstm_check, lstm_grad_check, lstm_shapes, lstm_training, lstm_values_check
from reference.ops.lstm_grad import lstm_grad


def act(name, alpha=None, beta=None):
    fn = ACTIVATIONS[name.lower()]
    a = fn.default_alpha if alpha is None else alpha
    b = fn.default_beta if beta is None else beta
    return lambda x: fn.forward(x, a, b)


def naive_lstm(X, W, R, B, P, lens, H0, C0, *, H, reverse=False, clip=None, input_forget=0,
               acts=("Sigmoid", "Tanh", "Tanh")):
    """One direction, one batch entry and one step at a time, straight from the ONNX LSTM equations.

    Returns Y [S, B, H], Y_h [B, H], Y_c [B, H], every cell state [S, B, H] and the gates [S, B, 4H].
    """
    S, Bn, _ = X.shape
    f, g, h = (act(a) if isinstance(a, str) else a for a in acts)
    Wi, Wo, Wf, Wc = (W[k * H:(k + 1) * H] for k in range(4))
    Ri, Ro, Rf, Rc = (R[k * H:(k + 1) * H] for k in range(4))
    Wbi, Wbo, Wbf, Wbc, Rbi, Rbo, Rbf, Rbc = (B[k * H:(k + 1) * H] for k in range(8))
    Pi, Po, Pf = P[:H], P[H:2 * H], P[2 * H:]
    c = (lambda a: a) if clip is None else (lambda a: np.clip(a, -clip, clip))
    Y, Cs, gates = np.zeros((S, Bn, H)), np.zeros((S, Bn, H)), np.zeros((S, Bn, 4 * H))
    Yh, Yc = np.zeros((Bn, H)), np.zeros((Bn, H))
    for b in range(Bn):
        hs, cs = H0[b], C0[b]
        for t in (range(lens[b] - 1, -1, -1) if reverse else range(lens[b])):
            x = X[t, b]
            i = f(c(Wi @ x + Ri @ hs + Wbi + Rbi + Pi * cs))
            fg = 1 - i if input_forget else f(c(Wf @ x + Rf @ hs + Wbf + Rbf + Pf * cs))
            cc = g(c(Wc @ x + Rc @ hs + Wbc + Rbc))
            cs = fg * cs + i * cc
            o = f(c(Wo @ x + Ro @ hs + Wbo + Rbo + Po * cs))
            hs = o * h(cs)
            Y[t, b], Cs[t, b] = hs, cs
            gates[t, b] = np.concatenate([i, o, fg, cc])
        Yh[b], Yc[b] = hs, cs
    return Y, Yh, Yc, Cs, gates


def make_case(seed, S=4, Bn=3, I=2, H=5, D=1, scale=0.6, peepholes=True):
    rng = np.random.default_rng(seed)
    return dict(X=rng.normal(size=(S, Bn, I)), W=scale * rng.normal(size=(D, 4 * H, I)),
                R=scale * rng.normal(size=(D, 4 * H, H)), B=scale * rng.normal(size=(D, 8 * H)),
                initial_h=rng.normal(size=(D, Bn, H)), initial_c=rng.normal(size=(D, Bn, H)),
                P=scale * rng.normal(size=(D, 3 * H)) if peepholes else None)


# --- forward ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bidirectional", [False, True])
def test_forward_matches_torch_lstm(bidirectional):
    torch = pytest.importorskip("torch", reason="torch is the optional extra `.[torch]`")
    S, Bn, I, H = 6, 3, 4, 5
    D = 2 if bidirectional else 1
    torch.manual_seed(7)
    lstm = torch.nn.LSTM(I, H, bidirectional=bidirectional).double()
    x = torch.randn(S, Bn, I, dtype=torch.float64)
    h0, c0 = torch.randn(D, Bn, H, dtype=torch.float64), torch.randn(D, Bn, H, dtype=torch.float64)
    with torch.no_grad():
        y, (yh, yc) = lstm(x, (h0, c0))
    # torch's gate order is i, f, g(c), o; ONNX's is i, o, f, c
    order = np.concatenate([np.arange(0, H), np.arange(3 * H, 4 * H), np.arange(H, 2 * H), np.arange(2 * H, 3 * H)])
    suffixes = ["", "_reverse"][:D]
    W = np.stack([getattr(lstm, f"weight_ih_l0{s}").detach().numpy()[order] for s in suffixes])
    R = np.stack([getattr(lstm, f"weight_hh_l0{s}").detach().numpy()[order] for s in suffixes])
    B = np.stack([np.concatenate([getattr(lstm, f"bias_ih_l0{s}").detach().numpy()[order],
                                  getattr(lstm, f"bias_hh_l0{s}").detach().numpy()[order]]) for s in suffixes])
    HAll, Ht, Ct, CAll, IOFC = lstm_training(x.numpy(), W, R, B, None, h0.numpy(), c0.numpy(), hidden_size=H,
                                             direction="bidirectional" if bidirectional else "forward")
    # torch's y is [S, B, D * H]; ours [S, D, B, H]
    np.testing.assert_allclose(HAll.transpose(0, 2, 1, 3).reshape(S, Bn, D * H), y.numpy(), rtol=0, atol=1e-13)
    np.testing.assert_allclose(Ht, yh.numpy(), rtol=0, atol=1e-13)
    np.testing.assert_allclose(Ct, yc.numpy(), rtol=0, atol=1e-13)
    assert HAll.shape == CAll.shape and IOFC.shape == (S, D, Bn, 4 * H)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("peepholes", [False, True])
def test_forward_matches_onnx_reference(direction, peepholes):
    D = 2 if direction == "bidirectional" else 1
    c = make_case(3, S=5, Bn=2, I=3, H=4, D=D, peepholes=peepholes)
    names = ["X", "W", "R", "B", "", "initial_h", "initial_c"] + (["P"] if peepholes else [])
    feeds = {n: c[n] for n in names if n}
    y, yh, yc = onnx_oracle.rnn("LSTM", names, feeds, direction, hidden_size=4)
    HAll, Ht, Ct, _, _ = lstm_training(**c, hidden_size=4, direction=direction)
    np.testing.assert_allclose(HAll, y, rtol=0, atol=1e-13)
    np.testing.assert_allclose(Ht, yh, rtol=0, atol=1e-13)
    if yc is not None:  # onnx < 1.18's evaluator has no Y_c; test_forward_matches_the_onnx_equations checks it
        np.testing.assert_allclose(Ct, yc, rtol=0, atol=1e-13)


NAIVE_CONFIGS = [
    dict(),
    dict(direction="reverse"),
    dict(direction="bidirectional"),
    dict(clip=0.7),
    dict(input_forget=1),
    dict(input_forget=1, clip=0.5, direction="reverse"),
    dict(activations=["HardSigmoid", "Softsign", "Softsign"]),
    dict(activations=["sigmoid", "tanh", "tanh", "HardSigmoid", "Softsign", "Elu"], direction="bidirectional",
         activation_alpha=[0.3, 0.7]),
    dict(lens=[4, 2, 0]),
    dict(lens=[4, 2, 0], direction="reverse"),
    dict(lens=[1, 4, 3], direction="bidirectional", clip=0.9),
]


@pytest.mark.parametrize("config", NAIVE_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
@pytest.mark.parametrize("peepholes", [False, True])
def test_forward_matches_the_onnx_equations(config, peepholes):
    config = dict(config)
    lens = config.pop("lens", None)
    direction = config.get("direction", "forward")
    D = 2 if direction == "bidirectional" else 1
    H = 5
    c = make_case(11, S=4, Bn=3, I=2, H=H, D=D, scale=1.2, peepholes=peepholes)
    sl = None if lens is None else np.array(lens, dtype=np.int32)
    HAll, Ht, Ct, CAll, IOFC = lstm_training(c["X"], c["W"], c["R"], c["B"], sl, c["initial_h"], c["initial_c"],
                                             c["P"], hidden_size=H, **config)
    names = config.get("activations") or ["Sigmoid", "Tanh", "Tanh"] * D
    alphas = list(config.get("activation_alpha") or [])
    acts = []
    for name in names:
        fn = ACTIVATIONS[name.lower()]
        acts.append(act(name, alphas.pop(0) if fn.uses_alpha and alphas else None))
    P = np.zeros((D, 3 * H)) if c["P"] is None else c["P"]
    for d in range(D):
        y, yh, yc, cs, gates = naive_lstm(
            c["X"], c["W"][d], c["R"][d], c["B"][d], P[d], [4, 4, 4] if lens is None else lens,
            c["initial_h"][d], c["initial_c"][d], H=H, reverse=direction == "reverse" or d == 1,
            clip=config.get("clip"), input_forget=config.get("input_forget", 0), acts=acts[3 * d:3 * d + 3])
        np.testing.assert_allclose(HAll[:, d], y, rtol=0, atol=1e-14)
        np.testing.assert_allclose(Ht[d], yh, rtol=0, atol=1e-14)
        np.testing.assert_allclose(Ct[d], yc, rtol=0, atol=1e-14)
        np.testing.assert_allclose(CAll[:, d], cs, rtol=0, atol=1e-14)
        np.testing.assert_allclose(IOFC[:, d], gates, rtol=0, atol=1e-14)
    if config.get("clip"):  # the cases reach the clip, or the comparison proves nothing about it
        unclipped = lstm_training(**c, hidden_size=H, **{**config, "clip": None})
        assert np.abs(unclipped[0] - lstm_training(**c, hidden_size=H, **config)[0]).max() > 1e-3


def test_peepholes_change_the_result():
    c = make_case(5)
    with_p = lstm_training(**c, hidden_size=5)
    without = lstm_training(**{**c, "P": None}, hidden_size=5)
    zero_p = lstm_training(**{**c, "P": np.zeros_like(c["P"])}, hidden_size=5)
    assert np.abs(with_p[0] - without[0]).max() > 1e-2
    for a, b in zip(without, zero_p):
        np.testing.assert_array_equal(a, b)


def test_sequence_lens_zero_keeps_the_initial_state_and_zero_rows():
    c = make_case(6, S=3, Bn=2, D=2)
    HAll, Ht, Ct, CAll, IOFC = lstm_training(c["X"], c["W"], c["R"], c["B"], np.array([0, 2], np.int32),
                                             c["initial_h"], c["initial_c"], c["P"], hidden_size=5,
                                             direction="bidirectional")
    np.testing.assert_array_equal(Ht[:, 0], c["initial_h"][:, 0])
    np.testing.assert_array_equal(Ct[:, 0], c["initial_c"][:, 0])
    assert not HAll[:, :, 0].any() and not CAll[:, :, 0].any() and not IOFC[:, :, 0].any()
    assert not HAll[2, :, 1].any() and HAll[:2, :, 1].all()
    # the reverse direction of entry 1 starts at step len - 1 = 1 and ends at step 0
    np.testing.assert_array_equal(Ht[1, 1], HAll[0, 1, 1])


def test_empty_sequences_and_batches():
    c = make_case(8, S=0, Bn=2)
    HAll, Ht, Ct, CAll, IOFC = lstm_training(**c, hidden_size=5)
    assert HAll.shape == (0, 1, 2, 5) and IOFC.shape == (0, 1, 2, 20)
    np.testing.assert_array_equal(Ht, c["initial_h"])
    np.testing.assert_array_equal(Ct, c["initial_c"])
    outs = lstm_training(**make_case(8, S=3, Bn=0), hidden_size=5)
    assert [o.shape for o in outs] == [(3, 1, 0, 5), (1, 0, 5), (1, 0, 5), (3, 1, 0, 5), (3, 1, 0, 20)]


@pytest.mark.parametrize("attrs, shapes, message", [
    (dict(hidden_size=0), {}, "hidden_size=0 must be given and >= 1"),
    (dict(hidden_size=5, direction="Forward"), {}, "direction='Forward' is not one of"),
    (dict(hidden_size=5, input_forget=2), {}, "input_forget=2 must be 0 or 1"),
    (dict(hidden_size=5, clip=0.0), {}, "clip=0.0 must be > 0"),
    (dict(hidden_size=5, activations=["sigmoid", "tanh"]), {}, "activations has 2 entries; 3 needed (f, g, h per direction)"),
    (dict(hidden_size=5, direction="bidirectional", activations=["sigmoid", "tanh", "tanh"]), {},
     "activations has 3 entries; 6 needed"),
    (dict(hidden_size=5, activations=["sigmoid", "tanh", "Affine"]), {}, "activation Affine needs an activation_alpha"),
    (dict(hidden_size=5), {"W": (1, 15, 2)}, "W shape [1, 15, 2] != [1, 20, 2]"),
    (dict(hidden_size=5), {"P": (1, 20)}, "P shape [1, 20] != [1, 15]"),
    (dict(hidden_size=5), {"initial_c": (1, 2, 5)}, "initial_c shape [1, 2, 5] != [1, 3, 5]"),
    (dict(hidden_size=5), {"IOFC": (4, 1, 3, 15)}, "IOFC shape [4, 1, 3, 15] != [4, 1, 3, 20]"),
    (dict(hidden_size=5), {"grad_Ct": (1, 3, 4)}, "grad_Ct shape"),
    (dict(hidden_size=5), {"X": (4, 3)}, "X shape (4, 3) must be [seq_length, batch_size, input_size]"),
])
def test_check_names_the_problem(attrs, shapes, message):
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    base = {k: v for k, v in lstm_shapes(4, 3, 2, 5, D).items() if k in ("X", "W", "R", "B", "initial_c", "P")}
    problem = lstm_check({**base, **shapes}, attrs)
    assert problem is not None and message in problem, problem
    assert lstm_check(base, dict(hidden_size=5, direction="bidirectional" if D == 2 else "forward")) is None


def test_lstm_grad_rejects_clip_and_values_check_reads_sequence_lens():
    base = {k: v for k, v in lstm_shapes(4, 3, 2, 5).items() if k in ("X", "W", "R")}
    assert lstm_check(base, dict(hidden_size=5, clip=3.0)) is None
    assert "clip=3.0 is not allowed on LSTMGrad" in lstm_grad_check(base, dict(hidden_size=5, clip=3.0))
    X = np.zeros((4, 3, 2))
    assert lstm_values_check({"X": X, "sequence_lens": np.array([4, 0, 2])}, {}) is None
    assert "must lie in [0, seq_length=4]" in lstm_values_check({"X": X, "sequence_lens": np.array([5, 0, 2])}, {})
    with pytest.raises(ValueError, match="must be integers in"):
        lstm_training(**make_case(1), sequence_lens=np.array([-1, 0, 2]), hidden_size=5)


# --- backward --------------------------------------------------------------------------------------------------

INPUTS = ("X", "W", "R", "B", "initial_h", "initial_c", "P")


def cotangents(seed, HAll, Ht, Ct, omit=()):
    rng = np.random.default_rng(seed)
    out = {"grad_HAll": rng.normal(size=HAll.shape), "grad_Ht": rng.normal(size=Ht.shape),
           "grad_Ct": rng.normal(size=Ct.shape)}
    return {k: None if k in omit else v for k, v in out.items()}


def grads_and_differences(c, attrs, sl=None, omit=(), grad=lstm_grad, transform=lambda s: s):
    """({input: <reference gradient, direction>}, {input: central difference of <cotangents, forward>})."""
    HAll, Ht, Ct, CAll, IOFC = lstm_training(**c, sequence_lens=sl, **attrs)
    cots = cotangents(99, HAll, Ht, Ct, omit)
    HAll_s, CAll_s, IOFC_s = transform((HAll, CAll, IOFC))
    D, H = c["W"].shape[0], attrs["hidden_size"]
    dX, dW, dR, dB, dH0, dC0, dP = grad(c["X"], c["W"], c["R"], sl, c["initial_h"], c["initial_c"], HAll_s, CAll_s,
                                         IOFC_s, **cots, **attrs, dB_shape=(D, 8 * H), dP_shape=(D, 3 * H))
    grads = dict(X=dX, W=dW, R=dR, B=dB, initial_h=dH0, initial_c=dC0, P=dP)
    rng = np.random.default_rng(5)
    analytic, numeric = {}, {}
    for name in INPUTS:
        if c[name] is None:
            continue
        t = rng.normal(size=c[name].shape)
        eps = 1e-6

        def pairing(sign):
            out = lstm_training(**{**c, name: c[name] + sign * eps * t}, sequence_lens=sl, **attrs)
            return sum(np.sum(cots[k] * v) for k, v in zip(("grad_HAll", "grad_Ht", "grad_Ct"), out[:3])
                       if cots[k] is not None)

        numeric[name] = (pairing(1) - pairing(-1)) / (2 * eps)
        analytic[name] = float(np.sum(grads[name] * t))
    return analytic, numeric


GRAD_CONFIGS = [
    dict(),
    dict(direction="reverse"),
    dict(direction="bidirectional"),
    dict(input_forget=1),
    dict(input_forget=1, direction="bidirectional"),
    dict(activations=["HardSigmoid", "Softsign", "Softsign"]),
    dict(activations=["sigmoid", "tanh", "tanh", "HardSigmoid", "Softsign", "Elu"], direction="bidirectional",
         activation_alpha=[0.3, 0.7]),
    dict(activations=["Sigmoid", "Softplus", "ScaledTanh"], activation_alpha=[1.5], activation_beta=[0.8]),
    dict(activations=["Affine", "ScaledTanh", "LeakyRelu"], activation_alpha=[0.3, 1.5, 0.2], activation_beta=[0.4, 0.8]),
    dict(activations=["Sigmoid", "Tanh", "LeakyRelu"], activation_alpha=[-0.3]),  # h' from C: alpha < 0 is fine
    dict(activations=["Sigmoid", "Tanh", "Elu"], activation_alpha=[-0.5]),
    dict(lens=[4, 2, 0]),
    dict(lens=[4, 2, 0], direction="reverse"),
    dict(lens=[1, 4, 3], direction="bidirectional"),
]


@pytest.mark.parametrize("config", GRAD_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_grad_is_the_vjp_of_the_forward_at_p_zero(config):
    config = dict(config)
    lens = config.pop("lens", None)
    D = 2 if config.get("direction") == "bidirectional" else 1
    c = make_case(21, S=4, Bn=3, I=2, H=5, D=D, scale=0.9)
    c["P"] = np.zeros((D, 15))  # LSTMGrad's contract: the gradient at P = 0, dP included
    sl = None if lens is None else np.array(lens, dtype=np.int32)
    analytic, numeric = grads_and_differences(c, dict(hidden_size=5, **config), sl)
    assert set(analytic) == set(INPUTS)
    for name in INPUTS:
        assert abs(analytic[name] - numeric[name]) <= 1e-7 * (1 + abs(numeric[name])), (name, analytic[name], numeric[name])
        if lens is None or name != "initial_h" or D == 1:
            assert abs(numeric[name]) > 1e-3, name  # the direction reaches the outputs


@pytest.mark.parametrize("omit", [("grad_Ht", "grad_Ct"), ("grad_HAll", "grad_Ct"), ("grad_HAll", "grad_Ht"),
                                  ("grad_HAll", "grad_Ht", "grad_Ct")])
def test_grad_with_cotangents_omitted(omit):
    c = make_case(22, D=1)
    c["P"] = np.zeros((1, 15))
    analytic, numeric = grads_and_differences(c, dict(hidden_size=5), omit=omit)
    for name in INPUTS:
        assert abs(analytic[name] - numeric[name]) <= 1e-7 * (1 + abs(numeric[name])), name
        if len(omit) == 3:
            assert analytic[name] == 0.0


def test_grad_with_initial_states_omitted():
    c = {**make_case(23), "initial_h": None, "initial_c": None, "P": np.zeros((1, 15))}
    HAll, Ht, Ct, CAll, IOFC = lstm_training(**c, hidden_size=5)
    cots = cotangents(1, HAll, Ht, Ct)
    dX, dW, dR, dB, dH0, dC0, dP = lstm_grad(c["X"], c["W"], c["R"], None, None, None, HAll, CAll, IOFC, **cots,
                                             hidden_size=5)
    assert dH0.shape == dC0.shape == (1, 3, 5) and np.abs(dH0).max() > 1e-3 and np.abs(dC0).max() > 1e-3
    # the gradient at zero initial states is the same as with explicit zeros
    zeros = lstm_grad(c["X"], c["W"], c["R"], None, np.zeros((1, 3, 5)), np.zeros((1, 3, 5)), HAll, CAll, IOFC,
                      **cots, hidden_size=5)
    for a, b in zip((dX, dW, dR, dB, dH0, dC0, dP), zeros):
        np.testing.assert_array_equal(a, b)
    analytic, numeric = grads_and_differences(c, dict(hidden_size=5))
    assert set(analytic) == {"X", "W", "R", "B", "P"}


def test_dp_is_the_peephole_gradient_at_zero_and_db_halves_are_equal():
    c = make_case(24, D=2)
    c["P"] = np.zeros((2, 15))
    HAll, Ht, Ct, CAll, IOFC = lstm_training(**c, hidden_size=5, direction="bidirectional")
    cots = cotangents(2, HAll, Ht, Ct)
    out = lstm_grad(c["X"], c["W"], c["R"], None, c["initial_h"], c["initial_c"], HAll, CAll, IOFC, **cots,
                    hidden_size=5, direction="bidirectional")
    dB, dP = out[3], out[6]
    np.testing.assert_array_equal(dB[:, :20], dB[:, 20:])
    # each element of dP by its own central difference
    eps = 1e-6
    for d in range(2):
        for k in range(15):
            e = np.zeros((2, 15))
            e[d, k] = eps
            plus = lstm_training(**{**c, "P": e}, hidden_size=5, direction="bidirectional")
            minus = lstm_training(**{**c, "P": -e}, hidden_size=5, direction="bidirectional")
            fd = sum(np.sum(cots[n] * (p - m)) for n, p, m in zip(("grad_HAll", "grad_Ht", "grad_Ct"), plus, minus))
            fd /= 2 * eps
            assert abs(fd - dP[d, k]) <= 1e-7 * (1 + abs(fd)), (d, k, fd, dP[d, k])
    assert np.abs(dP).min() > 0


def test_grad_of_empty_inputs():
    c = make_case(25, S=0, Bn=2)
    HAll, Ht, Ct, CAll, IOFC = lstm_training(**c, hidden_size=5)
    cots = cotangents(3, HAll, Ht, Ct)
    dX, dW, dR, dB, dH0, dC0, dP = lstm_grad(c["X"], c["W"], c["R"], None, c["initial_h"], c["initial_c"], HAll, CAll,
                                             IOFC, **cots, hidden_size=5)
    assert dX.shape == (0, 2, 2) and not dW.any() and not dR.any() and not dB.any() and not dP.any()
    np.testing.assert_array_equal(dH0, cots["grad_Ht"])
    np.testing.assert_array_equal(dC0, cots["grad_Ct"])


def test_grad_rejects_gate_activations_whose_output_hides_the_branch():
    c = make_case(28)
    attrs = dict(hidden_size=5, activations=["Sigmoid", "LeakyRelu", "Tanh"], activation_alpha=[-0.3])
    HAll, Ht, Ct, CAll, IOFC = lstm_training(**c, **attrs)
    with pytest.raises(ValueError, match="LeakyRelu with alpha=-0.3 < 0 is not invertible from its output"):
        lstm_grad(c["X"], c["W"], c["R"], None, None, None, HAll, CAll, IOFC, None, Ht, None, **attrs)


def test_grad_rejects_clip():
    c = make_case(26)
    HAll, Ht, Ct, CAll, IOFC = lstm_training(**c, hidden_size=5)
    with pytest.raises(ValueError, match="clip=5.0 is not allowed on LSTMGrad"):
        lstm_grad(c["X"], c["W"], c["R"], None, None, None, HAll, CAll, IOFC, None, Ht, None, hidden_size=5, clip=5.0)


@pytest.mark.parametrize("mutation", ["iofc_in_ifoc_order", "call_shifted_by_one_step"])
def test_mutated_saved_state_gives_a_wrong_gradient(mutation):
    """The VJP check above is sharp enough to see a saved-state layout error."""
    def transform(saved):
        HAll, CAll, IOFC = saved
        if mutation == "iofc_in_ifoc_order":
            H = IOFC.shape[-1] // 4
            IOFC = np.concatenate([IOFC[..., :H], IOFC[..., 2 * H:3 * H], IOFC[..., H:2 * H], IOFC[..., 3 * H:]], -1)
        else:
            CAll = np.concatenate([CAll[1:], CAll[-1:]])
        return HAll, CAll, IOFC

    c = make_case(27)
    c["P"] = np.zeros((1, 15))
    analytic, numeric = grads_and_differences(c, dict(hidden_size=5), transform=transform)
    worst = max(abs(analytic[n] - numeric[n]) / (1 + abs(numeric[n])) for n in INPUTS)
    assert worst > 1e-3
