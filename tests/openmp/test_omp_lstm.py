"""LSTMTraining / LSTMGrad of the C library against a float64 LSTM written here in torch (its autograd gives the
vector-Jacobian product), the float64 references (reference/forward/lstm.py, reference/ops/lstm_grad.py) and
torch.nn.LSTM; subsets, threads, sequence_lens semantics, empty and invalid inputs."""
from __future__ import annotations

import numpy as np
import pytest

from reference.forward.lstm import lstm_training
from reference.ops.lstm_grad import lstm_grad

from .omp_helpers import run_isolated

try:  # the independent float64 LSTM below is written in torch (optional extra `.[torch]`; CI installs it)
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch (the optional extra `.[torch]`) is not installed")

# ---- a float64 LSTM in torch, independent of the C code and of reference/ ------------------------

_ACTS = {  # name: (f(x, alpha, beta), takes alpha, takes beta, alpha default, beta default)
    "sigmoid": (lambda x, a, b: torch.sigmoid(x), False, False, None, None),
    "tanh": (lambda x, a, b: torch.tanh(x), False, False, None, None),
    "relu": (lambda x, a, b: torch.relu(x), False, False, None, None),
    "affine": (lambda x, a, b: a * x + b, True, True, None, None),
    "leakyrelu": (lambda x, a, b: torch.where(x >= 0, x, a * x), True, False, 0.01, None),
    "thresholdedrelu": (lambda x, a, b: torch.where(x > a, x, torch.zeros_like(x)), True, False, 1.0, None),
    "scaledtanh": (lambda x, a, b: a * torch.tanh(b * x), True, True, None, None),
    "hardsigmoid": (lambda x, a, b: torch.clamp(a * x + b, 0.0, 1.0), True, True, 0.2, 0.5),
    "elu": (lambda x, a, b: torch.where(x >= 0, x, a * torch.expm1(torch.clamp(x, max=0.0))), True, False, 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + x.abs()), False, False, None, None),
    "softplus": (lambda x, a, b: torch.nn.functional.softplus(x), False, False, None, None),
}


def _bind(D, activations, alpha, beta):
    names = activations or ["Sigmoid", "Tanh", "Tanh"] * D
    alpha, beta = list(alpha or []), list(beta or [])
    out = []
    for n in names:
        fn, takes_a, takes_b, a0, b0 = _ACTS[n.lower()]
        a = (alpha.pop(0) if alpha else a0) if takes_a else 0.0
        b = (beta.pop(0) if beta else b0) if takes_b else 0.0
        out.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return out


def lstm_torch(X, W, R, B=None, lens=None, h0=None, c0=None, P=None, *, hidden_size, direction="forward",
               activations=None, activation_alpha=None, activation_beta=None, clip=None, input_forget=0, **_):
    """ONNX LSTM-14 on float64 torch tensors: (HAll, Ht, Ct, CAll, IOFC); steps t >= lens[b] skipped."""
    S, nb, _ = X.shape
    H = hidden_size
    D = 2 if direction == "bidirectional" else 1
    acts = _bind(D, activations, activation_alpha, activation_beta)
    cl = (lambda a: a) if clip is None else (lambda a: torch.clamp(a, -clip, clip))
    L = torch.full((nb,), S, dtype=torch.int64) if lens is None else torch.as_tensor(np.asarray(lens, np.int64))
    hall, call, iofc = ([[None] * D for _ in range(S)] for _ in range(3))
    hts, cts = [], []
    zero = X.new_zeros((nb, H))
    for d in range(D):
        f, g, hh = acts[3 * d:3 * d + 3]
        bias = B[d][:4 * H] + B[d][4 * H:] if B is not None else X.new_zeros(4 * H)
        p = P[d] if P is not None else None
        h = h0[d] if h0 is not None else zero
        c = c0[d] if c0 is not None else zero
        for t in (reversed(range(S)) if d == 1 or direction == "reverse" else range(S)):
            m = (t < L)[:, None]
            a = X[t] @ W[d].T + h @ R[d].T + bias
            ai, ao, af, ac = a[:, :H], a[:, H:2 * H], a[:, 2 * H:3 * H], a[:, 3 * H:]
            if p is not None:
                ai, af = ai + p[:H] * c, af + p[2 * H:] * c
            i = f(cl(ai))
            ff = 1 - i if input_forget else f(cl(af))
            cc = g(cl(ac))
            C = ff * c + i * cc
            if p is not None:
                ao = ao + p[H:2 * H] * C
            o = f(cl(ao))
            Hn = o * hh(C)
            hall[t][d], call[t][d] = torch.where(m, Hn, 0.0), torch.where(m, C, 0.0)
            iofc[t][d] = torch.where(m, torch.cat([i, o, ff, cc], 1), 0.0)
            h, c = torch.where(m, Hn, h), torch.where(m, C, c)
        hts.append(h)
        cts.append(c)

    def stack(rows, w):
        return torch.stack([torch.stack(r) for r in rows]) if rows else X.new_zeros((0, D, nb, w))
    return stack(hall, H), torch.stack(hts), torch.stack(cts), stack(call, H), stack(iofc, 4 * H)


def _t(a):
    return None if a is None else torch.tensor(np.asarray(a, np.float64))


def torch_forward(ins, attrs):
    """float64 numpy outputs of lstm_torch for LSTMTraining's inputs (X, W, R, B, lens, h0, c0, P)."""
    with torch.no_grad():
        out = lstm_torch(*[_t(a) if i != 4 else a for i, a in enumerate(ins)], **attrs)
    return [o.numpy() for o in out]


def torch_vjp(ins, attrs, g_hall, g_ht, g_ct):
    """(dX, dW, dR, dB, dH0, dC0, dP) of <HAll, g_hall> + <Ht, g_ht> + <Ct, g_ct> at P = 0 by autograd; ins are
    LSTMTraining's inputs (B, initial_h, initial_c given), P replaced by zeros."""
    t = [_t(a) if i != 4 else a for i, a in enumerate(ins)]
    D = ins[1].shape[0]
    t[7] = torch.zeros((D, 3 * attrs["hidden_size"]), dtype=torch.float64)
    wrt = [0, 1, 2, 3, 5, 6, 7]
    for i in wrt:
        t[i].requires_grad_(True)
    hall, ht, ct, _, _ = lstm_torch(*t, **attrs)
    loss = sum((o * _t(g)).sum() for o, g in ((hall, g_hall), (ht, g_ht), (ct, g_ct)) if g is not None)
    return [g.numpy() for g in torch.autograd.grad(loss, [t[i] for i in wrt])]


# ---- helpers ----------------------------------------------------------------------------------------

def make_inputs(rng, S, nb, I, H, D, lens=None, peep=True, scale=0.6):
    """LSTMTraining inputs (X, W, R, B, sequence_lens, initial_h, initial_c, P), float64."""
    return [rng.normal(size=(S, nb, I)), rng.normal(0, scale, (D, 4 * H, I)), rng.normal(0, scale, (D, 4 * H, H)),
            rng.normal(0, 0.6, (D, 8 * H)), None if lens is None else np.array(lens, np.int32),
            rng.normal(size=(D, nb, H)), rng.normal(size=(D, nb, H)), rng.normal(0, 0.5, (D, 3 * H)) if peep else None]


def cast(ins, dtype):
    return [a if a is None or a.dtype == np.int32 else a.astype(dtype) for a in ins]


def grad_inputs(ins, saved, grads):
    """LSTMGrad's inputs from LSTMTraining's (X, W, R, B, lens, h0, c0, P), the saved (HAll, CAll, IOFC) and the
    incoming (grad_HAll, grad_Ht, grad_Ct)."""
    return [ins[0], ins[1], ins[2], ins[4], ins[5], ins[6], *saved, *grads]


def close(got, want, tol, what):
    """Within tol relative to the largest magnitude of want (unbounded activations grow large)."""
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * (1.0 + np.abs(want).max(initial=0.0)), err_msg=what)


TRAIN_OUT = ("HAll", "Ht", "Ct", "CAll", "IOFC")
GRAD_OUT = ("dX", "dW", "dR", "dB", "dH0", "dC0", "dP")

FEATURES = [  # attributes besides hidden_size, sequence_lens (None: omitted), peepholes; S = 5, batch 4
    ({}, None, False),
    ({}, None, True),
    ({"direction": "reverse"}, None, True),
    ({"direction": "bidirectional"}, None, True),
    ({}, [5, 3, 1, 0], True),
    ({"direction": "reverse"}, [5, 3, 1, 0], False),
    ({"direction": "bidirectional"}, [1, 5, 0, 3], True),
    ({"input_forget": 1}, None, True),
    ({"input_forget": 1, "direction": "bidirectional"}, [2, 5, 0, 4], False),
    ({"clip": 0.9}, None, True),
    ({"clip": 1.1, "direction": "reverse", "input_forget": 1}, [5, 3, 1, 0], True),
    ({"activations": ["HardSigmoid", "Softsign", "Softsign"]}, None, True),
    ({"activations": ["Relu", "Tanh", "Elu"], "activation_alpha": [0.7]}, [5, 3, 1, 0], False),
    ({"activations": ["Affine", "ScaledTanh", "LeakyRelu"], "activation_alpha": [0.3, 1.5, 0.2],
      "activation_beta": [0.4, 0.8]}, None, True),
    ({"activations": ["Sigmoid", "Softplus", "ThresholdedRelu"], "activation_alpha": [0.2]}, None, True),
    ({"activations": ["sigmoid", "tanh", "tanh", "HARDSIGMOID", "relu", "Softsign"], "direction": "bidirectional",
      "clip": 2.0}, [1, 5, 0, 3], True),
    # h with alpha < 0: LSTMGrad takes h's slope from CAll (h's input), so it is supported
    ({"activations": ["Sigmoid", "Tanh", "LeakyRelu"], "activation_alpha": [-0.3]}, None, False),
]
FEATURE_IDS = [f"{i}-{sorted(f[0].items())}-lens={f[1]}-peep={f[2]}" for i, f in enumerate(FEATURES)]


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("extra,lens,peep", FEATURES, ids=FEATURE_IDS)
def test_forward_features(lib, rng, extra, lens, peep, dtype):
    """LSTMTraining against lstm_torch and reference.forward.lstm, inputs rounded to dtype for all three."""

    H = 4
    D = 2 if extra.get("direction") == "bidirectional" else 1
    ins = cast(make_inputs(rng, 5, 4, 3, H, D, lens, peep), dtype)
    attrs = {"hidden_size": H, **extra}
    got = lib.run("LSTMTraining", ins, attrs, threads=2)
    exact = cast(ins, np.float64)
    tol = 1e-12 if dtype == np.float64 else 2e-6
    for want in (torch_forward(exact, attrs), lstm_training(*exact, **attrs)):
        for g, w, name in zip(got, want, TRAIN_OUT):
            assert g.dtype == dtype and g.shape == w.shape, name
            close(g, w, tol, name)
    for b, n in enumerate(lens or []):  # rows past a length are exactly 0
        for k in (0, 3, 4):
            assert not got[k][n:, :, b].any(), TRAIN_OUT[k]
    if "clip" in extra:  # the clip must bite somewhere for the case to mean anything
        unclipped = torch_forward(exact, {k: v for k, v in attrs.items() if k != "clip"})
        assert np.abs(unclipped[4] - got[4]).max() > 1e-3


@pytest.mark.parametrize("I", [20, 16])
def test_forward_whole_packed_panels(lib, rng, I):
    """float32 with W and R wide enough to fill whole packed panels (transposed in 8 x 8 blocks, I = 20 with a
    K % 8 tail) and spanning several steps of a chunk: against the float64 reference. The small cases above fill
    no panel at AVX-512."""
    S, nb, H = 7, 6, 40
    ins = cast(make_inputs(rng, S, nb, I, H, 1, peep=True, scale=1 / np.sqrt(H)), np.float32)
    got = lib.run("LSTMTraining", ins, {"hidden_size": H}, threads=2)
    for g, w, name in zip(got, lstm_training(*cast(ins, np.float64), hidden_size=H), TRAIN_OUT):
        close(g, w, 2e-6, name)


@pytest.mark.parametrize("dtype,H", [(np.float32, 128), (np.float64, 64)])
def test_padded_work_rows(lib, rng, dtype, H):
    """4H elements a multiple of 2 KiB: the forward's gate pre-activations and the backward's gate gradients get
    a cache line of padding per row (L1 sets), which every product, gate loop and sum must step over. Both ops
    against the float64 reference, every output wanted."""
    S, nb, I = 3, 5, 6
    ins = cast(make_inputs(rng, S, nb, I, H, 2, [3, 1, 2, 0, 3], peep=False, scale=1 / np.sqrt(H)), dtype)
    attrs = {"hidden_size": H, "direction": "bidirectional"}
    exact = cast(ins, np.float64)
    forward = lstm_training(*exact, **attrs)
    for g, w, name in zip(lib.run("LSTMTraining", ins, attrs, threads=2), forward, TRAIN_OUT):
        close(g, w, 1e-12 if dtype == np.float64 else 2e-6, name)
    hall, _, _, call, iofc = forward
    saved = cast([hall, call, iofc], dtype)
    grads = cast([rng.normal(size=hall.shape), rng.normal(size=(2, nb, H)), rng.normal(size=(2, nb, H))], dtype)
    got = lib.run("LSTMGrad", grad_inputs(ins, saved, grads), attrs, threads=2)
    want = lstm_grad(*grad_inputs(exact, cast(saved, np.float64), cast(grads, np.float64)), **attrs)
    for g, w, name in zip(got, want, GRAD_OUT):
        close(g, w, 1e-12 if dtype == np.float64 else 2e-5, name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("extra,lens,peep", [f for f in FEATURES if "clip" not in f[0]],
                         ids=[i for i, f in zip(FEATURE_IDS, FEATURES) if "clip" not in f[0]])
@needs_torch
def test_backward_features(lib, rng, extra, lens, peep, dtype):
    """LSTMGrad against torch autograd of lstm_torch at P = 0 and reference.ops.lstm_grad. The saved state is the
    float64 forward (with B, without P) rounded to dtype; every incoming gradient given."""

    H = 4
    D = 2 if extra.get("direction") == "bidirectional" else 1
    ins = cast(make_inputs(rng, 5, 4, 3, H, D, lens, peep=False), dtype)
    attrs = {"hidden_size": H, **extra}
    exact = cast(ins, np.float64)
    hall, ht, ct, call, iofc = torch_forward(exact, attrs)
    saved = cast([hall, call, iofc], dtype)
    grads = cast([rng.normal(size=hall.shape), rng.normal(size=ht.shape), rng.normal(size=ct.shape)], dtype)
    got = lib.run("LSTMGrad", grad_inputs(ins, saved, grads), attrs, threads=2)
    vjp = torch_vjp(exact, attrs, *cast(grads, np.float64))
    ref = lstm_grad(*grad_inputs(exact, cast(saved, np.float64), cast(grads, np.float64)), **attrs)
    tol_vjp = 1e-11 if dtype == np.float64 else 5e-5  # torch recomputes the forward; the C code reads it rounded
    for g, v, r, name in zip(got, vjp, ref, GRAD_OUT):
        assert g.dtype == dtype and g.shape == v.shape, name
        close(g, v, tol_vjp, name)
        close(g, r, 1e-12 if dtype == np.float64 else 2e-5, name + " (reference)")
    if extra.get("input_forget"):  # f = 1 - i: no gradient reaches the forget gate's weights
        for k in (1, 2):
            assert not got[k][:, 2 * H:3 * H].any()
        assert not got[6][:, 2 * H:].any()


@needs_torch
def test_torch_nn_lstm(lib, rng):
    """The default configuration is torch.nn.LSTM (gate order i, f, g, o there; one bias per product), forward
    and backward."""
    S, nb, I, H = 6, 3, 5, 7
    ins = make_inputs(rng, S, nb, I, H, 1, peep=False)
    X, W, R, B, _, h0, c0, _ = ins
    perm = np.concatenate([np.arange(H) + q * H for q in (0, 2, 3, 1)])  # ONNX i, o, f, c -> torch i, f, g, o
    m = torch.nn.LSTM(I, H).double()
    with torch.no_grad():
        m.weight_ih_l0.copy_(torch.tensor(W[0][perm]))
        m.weight_hh_l0.copy_(torch.tensor(R[0][perm]))
        m.bias_ih_l0.copy_(torch.tensor(B[0, :4 * H][perm]))
        m.bias_hh_l0.copy_(torch.tensor(B[0, 4 * H:][perm]))
    x, th0, tc0 = (torch.tensor(a, requires_grad=True) for a in (X, h0, c0))
    y, (hn, cn) = m(x, (th0, tc0))
    hall, ht, ct, call, iofc = lib.run("LSTMTraining", ins, {"hidden_size": H})
    close(hall[:, 0], y.detach().numpy(), 1e-13, "HAll")
    close(ht, hn.detach().numpy(), 1e-13, "Ht")
    close(ct, cn.detach().numpy(), 1e-13, "Ct")
    gy, gh, gc = rng.normal(size=(S, nb, H)), rng.normal(size=(1, nb, H)), rng.normal(size=(1, nb, H))
    want = torch.autograd.grad((y * torch.tensor(gy)).sum() + (hn * torch.tensor(gh)).sum() + (cn * torch.tensor(gc)).sum(),
                               [x, th0, tc0, m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0])
    want = [w.numpy() for w in want]
    dx, dw, dr, db, dh0, dc0, _ = lib.run("LSTMGrad", grad_inputs(ins, [hall, call, iofc], [gy[:, None], gh, gc]),
                                          {"hidden_size": H})
    inv = np.argsort(perm)
    close(dx, want[0], 1e-12, "dX")
    close(dh0, want[1], 1e-12, "dH0")
    close(dc0, want[2], 1e-12, "dC0")
    close(dw[0], want[3][inv], 1e-12, "dW")
    close(dr[0], want[4][inv], 1e-12, "dR")
    close(db[0, :4 * H], want[5][inv], 1e-12, "dWb")
    close(db[0, 4 * H:], want[6][inv], 1e-12, "dRb")


@needs_torch
def test_backward_vs_finite_differences(lib, rng):
    """lstm_torch's autograd is checked once against central differences of the C forward itself."""
    H = 3
    ins = make_inputs(rng, 3, 2, 2, H, 1, lens=[3, 2], peep=False)
    attrs = {"hidden_size": H, "direction": "reverse"}
    hall, ht, ct, call, iofc = lib.run("LSTMTraining", ins, attrs)
    g = [rng.normal(size=hall.shape), rng.normal(size=ht.shape), rng.normal(size=ct.shape)]
    got = lib.run("LSTMGrad", grad_inputs(ins, [hall, call, iofc], g), attrs)

    def loss(p):
        o = lib.run("LSTMTraining", p, attrs)
        return float((o[0] * g[0]).sum() + (o[1] * g[1]).sum() + (o[2] * g[2]).sum())

    P0 = np.zeros((1, 3 * H))
    for k, idx in ((0, 0), (1, 1), (2, 2), (3, 3), (4, 5), (5, 6), (6, 7)):
        base = ins[idx] if idx != 7 else P0
        num = np.zeros_like(base)
        for j in np.ndindex(base.shape):
            up, dn = base.copy(), base.copy()
            up[j] += 1e-6
            dn[j] -= 1e-6
            pu, pd = list(ins), list(ins)
            pu[idx], pd[idx] = up, dn
            num[j] = (loss(pu) - loss(pd)) / 2e-6
        np.testing.assert_allclose(got[k], num, atol=2e-7, err_msg=GRAD_OUT[k])


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("input_forget", [0, 1])
def test_sequence_lens_equal_truncated_runs(lib, rng, direction, input_forget):
    """ONNX semantics, checked without any reference: batch row b of length L gives what X[:L, b] run alone gives (a
    reverse direction starting at step L - 1); its rows past L are 0 in HAll, CAll, IOFC and dX, and the weight
    gradients are the sums over the rows' own runs."""
    S, nb, H, lens = 6, 4, 5, [6, 4, 1, 0]
    D = 2 if direction == "bidirectional" else 1
    ins = make_inputs(rng, S, nb, 3, H, D, lens)
    attrs = {"hidden_size": H, "direction": direction, "input_forget": input_forget}
    out = lib.run("LSTMTraining", ins, attrs, threads=2)
    gins = [ins[0], ins[1], ins[2], ins[4], ins[5], ins[6]]
    g = [rng.normal(size=out[0].shape), rng.normal(size=out[1].shape), rng.normal(size=out[2].shape)]
    grads = lib.run("LSTMGrad", gins + [out[0], out[3], out[4]] + g, attrs, threads=2)
    sums = [np.zeros_like(grads[k]) for k in (1, 2, 3, 6)]
    for b, n in enumerate(lens):
        alone = [ins[0][:n, b:b + 1], ins[1], ins[2], ins[3], None, ins[5][:, b:b + 1], ins[6][:, b:b + 1], ins[7]]
        one = lib.run("LSTMTraining", alone, attrs)
        for k in (0, 3, 4):
            close(out[k][:n, :, b:b + 1], one[k], 1e-13, f"{TRAIN_OUT[k]} row {b}")
            assert not out[k][n:, :, b].any()
        for k in (1, 2):
            close(out[k][:, b:b + 1], one[k], 1e-13, f"{TRAIN_OUT[k]} row {b}")
        g1 = lib.run("LSTMGrad", [alone[0], ins[1], ins[2], None, alone[5], alone[6], one[0], one[3], one[4],
                                  g[0][:n, :, b:b + 1], g[1][:, b:b + 1], g[2][:, b:b + 1]], attrs)
        close(grads[0][:n, b:b + 1], g1[0], 1e-12, f"dX row {b}")
        assert not grads[0][n:, b].any()
        close(grads[4][:, b:b + 1], g1[4], 1e-12, f"dH0 row {b}")
        close(grads[5][:, b:b + 1], g1[5], 1e-12, f"dC0 row {b}")
        for acc, k in zip(sums, (1, 2, 3, 6)):
            acc += g1[k]
    for acc, k in zip(sums, (1, 2, 3, 6)):
        close(grads[k], acc, 1e-12, GRAD_OUT[k])


# ---- subsets and threads: bitwise ---------------------------------------------------------------

SUBSET_CASES = {  # big enough for the threaded recurrence (two column blocks of H = 300)
    "default": ({}, None, False),
    "bidi_lens_peep_ifg_clip": ({"direction": "bidirectional", "input_forget": 1, "clip": 1.5}, "lens", True),
    "reverse_acts_lens": ({"direction": "reverse", "activations": ["HardSigmoid", "Softsign", "Elu"],
                           "activation_alpha": [0.3, 0.9], "activation_beta": [0.4]}, "lens", True),
}


@pytest.mark.parametrize("case", sorted(SUBSET_CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_output_subsets_and_threads_bitwise(lib, rng, case, dtype):
    """Every output alone (and a few subsets) equals the full run bitwise; 1 and 2 threads, with and without the
    forced split, agree bitwise."""
    extra, lens, peep = SUBSET_CASES[case]
    S, nb, I, H = 5, 40, 16, 300
    D = 2 if extra.get("direction") == "bidirectional" else 1
    ins = cast(make_inputs(rng, S, nb, I, H, D, (np.arange(nb) % (S + 1)) if lens else None, peep,
                           scale=1 / np.sqrt(H)), dtype)
    attrs = {"hidden_size": H, **extra}
    full = lib.run("LSTMTraining", ins, attrs, threads=2)
    for forced in (False, True):
        with lib.force_split(forced):
            for th in (1, 2):
                for a, b in zip(lib.run("LSTMTraining", ins, attrs, threads=th), full):
                    np.testing.assert_array_equal(a, b)
    for k in range(5):
        part = lib.run("LSTMTraining", ins, attrs, want_outputs=[j == k for j in range(5)], threads=2)
        assert all(part[j] is None for j in range(5) if j != k)
        np.testing.assert_array_equal(part[k], full[k], err_msg=TRAIN_OUT[k])
    g = cast([rng.normal(size=full[0].shape), rng.normal(size=full[1].shape), rng.normal(size=full[2].shape)], dtype)
    gin = grad_inputs(ins, [full[0], full[3], full[4]], g)
    gattrs = {k: v for k, v in attrs.items() if k != "clip"}
    gfull = lib.run("LSTMGrad", gin, gattrs, threads=2)
    for forced in (False, True):
        with lib.force_split(forced):
            for th in (1, 2):
                for a, b in zip(lib.run("LSTMGrad", gin, gattrs, threads=th), gfull):
                    np.testing.assert_array_equal(a, b)
    subsets = [[k] for k in range(7)] + [[1, 2], [0, 4, 5], [3, 6]]
    for sub in subsets:
        part = lib.run("LSTMGrad", gin, gattrs, want_outputs=[j in sub for j in range(7)], threads=2)
        for k in range(7):
            if k in sub:
                np.testing.assert_array_equal(part[k], gfull[k], err_msg=f"{GRAD_OUT[k]} of {sub}")
            else:
                assert part[k] is None


@needs_torch
def test_own_saved_state_roundtrip(lib, rng):
    """LSTMGrad fed by the library's own LSTMTraining equals LSTMGrad fed by the float64 reference forward."""
    ins = make_inputs(rng, 5, 3, 4, 5, 1, peep=False)
    attrs = {"hidden_size": 5}
    hall, ht, ct, call, iofc = lib.run("LSTMTraining", ins, attrs)
    g = [rng.normal(size=hall.shape), None, rng.normal(size=ct.shape)]
    mine = lib.run("LSTMGrad", grad_inputs(ins, [hall, call, iofc], g), attrs)
    e = torch_forward(ins, attrs)
    theirs = lib.run("LSTMGrad", grad_inputs(ins, [e[0], e[3], e[4]], g), attrs)
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a, b, atol=1e-12)


def test_peepholes_absent_is_not_zero_times_state(lib):
    """Without P there is no peephole term at all (as onnxruntime 1.19.2 computes it: IOFC 0.5, Ct inf, HAll 0.5
    here): an infinite initial_c gives finite gates where Pi * C with P = 0 would be 0 * inf = NaN. With P = 0
    given, the formula's NaN is what comes out."""
    H = 2
    ins = [np.zeros((1, 1, 1)), np.zeros((1, 4 * H, 1)), np.zeros((1, 4 * H, H)), None, None, np.zeros((1, 1, H)),
           np.full((1, 1, H), np.inf), None]
    hall, ht, ct, call, iofc = lib.run("LSTMTraining", ins, {"hidden_size": H})
    assert np.isinf(ct).all() and not np.isnan(iofc).any()  # f = 0.5: C = 0.5 * inf + 0.5 * 0 = inf
    for mine, theirs in zip((hall, ht, ct, call, iofc), lstm_training(*ins, hidden_size=H)):
        np.testing.assert_array_equal(mine, theirs)  # the reference leaves the term out too
    ins[7] = np.zeros((1, 3 * H))
    _, _, _, _, iofc = lib.run("LSTMTraining", ins, {"hidden_size": H})
    assert np.isnan(iofc[0, 0, 0, :H]).all()  # Pi * C = 0 * inf


@needs_torch
def test_empty_sequence_batch_and_input(lib, rng):
    for dtype in (np.float32, np.float64):
        ins = cast(make_inputs(rng, 0, 2, 3, 4, 1), dtype)
        hall, ht, ct, call, iofc = lib.run("LSTMTraining", ins, {"hidden_size": 4}, threads=2)
        assert hall.shape == (0, 1, 2, 4) and iofc.shape == (0, 1, 2, 16)
        np.testing.assert_array_equal(ht, ins[5])
        np.testing.assert_array_equal(ct, ins[6])
        g = cast([np.zeros((0, 1, 2, 4)), rng.normal(size=(1, 2, 4)), rng.normal(size=(1, 2, 4))], dtype)
        dx, dw, dr, db, dh0, dc0, dp = lib.run("LSTMGrad", grad_inputs(ins, [hall, call, iofc], g), {"hidden_size": 4})
        assert dx.shape == (0, 2, 3) and not dw.any() and not dr.any() and not db.any() and not dp.any()
        np.testing.assert_array_equal(dh0, g[1])
        np.testing.assert_array_equal(dc0, g[2])
        ins = cast(make_inputs(rng, 3, 0, 3, 4, 2), dtype)
        out = lib.run("LSTMTraining", ins, {"hidden_size": 4, "direction": "bidirectional"})
        assert out[0].shape == (3, 2, 0, 4) and out[1].shape == (2, 0, 4)
        grads = lib.run("LSTMGrad", grad_inputs(ins, [out[0], out[3], out[4]], [None] * 3),
                        {"hidden_size": 4, "direction": "bidirectional"})
        assert grads[0].shape == (3, 0, 3) and not grads[1].any() and not grads[3].any()
    # input_size 0: only the recurrence
    ins = make_inputs(rng, 4, 2, 0, 3, 1)
    got = lib.run("LSTMTraining", ins, {"hidden_size": 3})
    for g, w, name in zip(got, torch_forward(ins, {"hidden_size": 3}), TRAIN_OUT):
        close(g, w, 1e-13, name)


# ---- invalid inputs -------------------------------------------------------------------------------

def _base():
    rng = np.random.default_rng(5)
    return cast(make_inputs(rng, 3, 2, 3, 4, 1), np.float32)


BAD = [  # (id, attribute overrides, (input position in LSTMTraining, value), status, message fragment)
    ("direction_bad", {"direction": "Forward"}, None, "INVALID_ATTRIBUTE", "direction 'Forward'"),
    ("activations_unknown", {"activations": ["Swish", "Tanh", "Tanh"]}, None, "INVALID_ATTRIBUTE",
     "activation 'Swish' is not an ONNX RNN activation"),
    ("activations_len", {"activations": ["Sigmoid", "Tanh"]}, None, "INVALID_ATTRIBUTE",
     "must list 3 functions per direction"),
    ("activations_len_bidi", {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh", "Tanh"]}, None,
     "INVALID_ATTRIBUTE", "6 for 2 direction(s), got 3"),
    ("affine_no_alpha", {"activations": ["Affine", "Tanh", "Tanh"]}, None, "INVALID_ATTRIBUTE",
     "Affine needs an activation_alpha value"),
    ("scaledtanh_no_beta", {"activations": ["Sigmoid", "ScaledTanh", "Tanh"], "activation_alpha": [1.0]}, None,
     "INVALID_ATTRIBUTE", "ScaledTanh needs an activation_beta value"),
    ("activations_not_strings", {"activations": [1, 2, 3]}, None, "INVALID_ATTRIBUTE", "must be of type strings"),
    ("hidden_missing", {"hidden_size": None}, None, "INVALID_ATTRIBUTE", "'hidden_size' is required"),
    ("hidden_zero", {"hidden_size": 0}, None, "INVALID_ATTRIBUTE", "hidden_size must be in"),
    ("hidden_negative", {"hidden_size": -4}, None, "INVALID_ATTRIBUTE", "hidden_size must be in"),
    ("hidden_huge", {"hidden_size": 1 << 40}, None, "INVALID_ATTRIBUTE", "hidden_size must be in"),
    ("hidden_mismatch", {"hidden_size": 5}, None, "INVALID_ARGUMENT", "input W must have shape [1, 20, 3]"),
    ("input_forget_2", {"input_forget": 2}, None, "INVALID_ATTRIBUTE", "input_forget must be 0 or 1"),
    ("input_forget_float", {"input_forget": 1.0}, None, "INVALID_ATTRIBUTE", "'input_forget' must be of type int"),
    ("layout_unknown", {"layout": 0}, None, "UNKNOWN_ATTRIBUTE", "unknown attribute 'layout'"),
    ("seq_lens_negative", {}, (4, np.array([-1, 2], np.int32)), "INVALID_ARGUMENT", "sequence_lens[0] = -1 is outside"),
    ("seq_lens_shape", {}, (4, np.array([3, 2, 1], np.int32)), "INVALID_ARGUMENT",
     "input sequence_lens must have shape [2]"),
    ("seq_lens_range", {}, (4, np.array([3, 9], np.int32)), "INVALID_ARGUMENT", "outside [0, seq_length=3]"),
    ("seq_lens_dtype", {}, (4, np.array([3, 3], np.int64)), "UNSUPPORTED_DTYPE", "sequence_lens must be int32"),
    ("x_rank2", {}, (0, np.zeros((3, 3), np.float32)), "INVALID_ARGUMENT", "X must have rank 3"),
    ("r_shape", {}, (2, np.zeros((1, 16, 5), np.float32)), "INVALID_ARGUMENT", "input R must have shape [1, 16, 4]"),
    ("h0_shape", {}, (5, np.zeros((1, 3, 4), np.float32)), "INVALID_ARGUMENT",
     "input initial_h must have shape [1, 2, 4]"),
    ("c0_shape", {}, (6, np.zeros((2, 2, 4), np.float32)), "INVALID_ARGUMENT",
     "input initial_c must have shape [1, 2, 4]"),
    ("w_two_dirs", {}, (1, np.zeros((2, 16, 3), np.float32)), "INVALID_ARGUMENT", "input W must have shape [1, 16, 3]"),
    ("bidi_one_dir", {"direction": "bidirectional"}, None, "INVALID_ARGUMENT", "input W must have shape [2, 16, 3]"),
    ("dtype_mix", {}, (1, np.zeros((1, 16, 3), np.float64)), "UNSUPPORTED_DTYPE", "share one dtype"),
    ("dtype_f16", {}, (0, np.zeros((3, 2, 3), np.float16)), "UNSUPPORTED_DTYPE", "dtype float16 is not supported"),
    ("missing_r", {}, (2, None), "INVALID_ARGUMENT", "required input 2 (R) is missing"),
    ("missing_x", {}, (0, None), "INVALID_ARGUMENT", "required input 0 (X) is missing"),
]
TRAIN_ONLY = [
    ("clip_zero", {"clip": 0.0}, None, "INVALID_ATTRIBUTE", "clip must be > 0"),
    ("clip_nan", {"clip": float("nan")}, None, "INVALID_ATTRIBUTE", "clip must be > 0"),
    ("b_shape", {}, (3, np.zeros((1, 16), np.float32)), "INVALID_ARGUMENT", "input B must have shape [1, 32]"),
    ("p_shape", {}, (7, np.zeros((1, 16), np.float32)), "INVALID_ARGUMENT", "input P must have shape [1, 12]"),
]
GRAD_ONLY = [  # input positions here are LSTMGrad's
    ("clip_given", {"clip": 0.85}, None, "INVALID_ATTRIBUTE", "clip is not valid for LSTMGrad"),
    ("clip_float_max", {"clip": 3.4028234663852886e+38}, None, "INVALID_ATTRIBUTE", "clip is not valid for LSTMGrad"),
    ("b_given", {"B": 1}, None, "UNKNOWN_ATTRIBUTE", "unknown attribute 'B'"),
    ("missing_hall", {}, (6, None), "INVALID_ARGUMENT", "required input 6 (HAll) is missing"),
    ("missing_iofc", {}, (8, None), "INVALID_ARGUMENT", "required input 8 (IOFC) is missing"),
    ("iofc_shape", {}, (8, np.zeros((3, 1, 2, 15), np.float32)), "INVALID_ARGUMENT",
     "input IOFC must have shape [3, 1, 2, 16]"),
    ("call_shape", {}, (7, np.zeros((2, 1, 2, 4), np.float32)), "INVALID_ARGUMENT",
     "input CAll must have shape [3, 1, 2, 4]"),
    ("hall_rank", {}, (6, np.zeros((3, 2, 4), np.float32)), "INVALID_ARGUMENT", "input HAll must have shape [3, 1, 2, 4]"),
    ("grad_hall_shape", {}, (9, np.zeros((2, 1, 2, 4), np.float32)), "INVALID_ARGUMENT",
     "input grad_HAll must have shape [3, 1, 2, 4]"),
    ("grad_ht_shape", {}, (10, np.zeros((1, 2, 5), np.float32)), "INVALID_ARGUMENT",
     "input grad_Ht must have shape [1, 2, 4]"),
    ("grad_ct_shape", {}, (11, np.zeros((1, 2, 3), np.float32)), "INVALID_ARGUMENT",
     "input grad_Ct must have shape [1, 2, 4]"),
    ("saved_dtype", {}, (7, np.zeros((3, 1, 2, 4), np.float64)), "UNSUPPORTED_DTYPE", "share one dtype"),
    ("db_shape_wrong", {"dB_shape": [1, 16]}, None, "INVALID_ATTRIBUTE", "dB_shape must be [1, 32]"),
    ("dp_shape_wrong", {"dP_shape": [2, 12]}, None, "INVALID_ATTRIBUTE", "dP_shape must be [1, 12]"),
    ("leakyrelu_f_negative_alpha", {"activations": ["LeakyRelu", "Tanh", "Tanh"], "activation_alpha": [-0.5]}, None,
     "NOT_IMPLEMENTED", "not invertible from its saved output; LSTMGrad needs alpha >= 0"),
    ("elu_g_negative_alpha", {"activations": ["Sigmoid", "Elu", "Tanh"], "activation_alpha": [-0.5]}, None,
     "NOT_IMPLEMENTED", "not invertible"),
]
GRAD_POS = {0: 0, 1: 1, 2: 2, 4: 3, 5: 4, 6: 5}  # LSTMTraining position -> LSTMGrad position


def _invalid_call(lib, op, attr_over, input_over):
    ins = _base()
    attrs = {k: v for k, v in {"hidden_size": 4, **attr_over}.items() if v is not None}
    if op == "LSTMGrad":
        z = np.zeros
        ins = [ins[0], ins[1], ins[2], ins[4], ins[5], ins[6], z((3, 1, 2, 4), np.float32), z((3, 1, 2, 4), np.float32),
               z((3, 1, 2, 16), np.float32), None, None, None]
    if input_over:
        ins[input_over[0]] = input_over[1]
    return lambda: lib.run(op, ins, attrs)


INVALID = ([("LSTMTraining", *b) for b in BAD + TRAIN_ONLY] +
           [("LSTMGrad", name, a, i and (GRAD_POS[i[0]], i[1]), st, frag) for name, a, i, st, frag in BAD] +
           [("LSTMGrad", *b) for b in GRAD_ONLY])


@pytest.mark.parametrize("op,name,attr_over,input_over,status,frag", INVALID, ids=[f"{c[0]}-{c[1]}" for c in INVALID])
def test_invalid(lib, op, name, attr_over, input_over, status, frag):
    with pytest.raises(lib.KernelError) as e:
        _invalid_call(lib, op, attr_over, input_over)()
    assert e.value.status_name == "OPC_ERR_" + status, e.value
    assert frag in e.value.message, e.value.message


def test_clip_rejected_before_anything_runs(lib, rng):
    """LSTMGrad rejects clip even when everything else is valid (LSTMTraining accepts the same attributes)."""
    ins = make_inputs(rng, 3, 2, 3, 4, 1, peep=False)
    out = lib.run("LSTMTraining", ins, {"hidden_size": 4, "clip": 3.0})
    with pytest.raises(lib.KernelError) as e:
        lib.run("LSTMGrad", grad_inputs(ins, [out[0], out[3], out[4]], [None] * 3), {"hidden_size": 4, "clip": 3.0})
    assert e.value.status_name == "OPC_ERR_INVALID_ATTRIBUTE"


HUGE_PRELUDE = """
import ctypes, numpy as np
from harness.backends import openmp_lib as L
lib = L.load()

def attempt(op, arrays, shapes, attrs, n_out):
    # the arrays' data with the given (fake, huge) shapes: only validation may look at them
    call = L._Call(arrays, attrs)
    keep = []
    for i, s in shapes.items():
        dims = (ctypes.c_int64 * len(s))(*s)
        keep.append(dims)
        call.inputs[i].shape, call.inputs[i].rank = dims, len(s)
    err = ctypes.create_string_buffer(512)
    outs = (L._Tensor * n_out)()
    for o in outs:
        o.rank, o.data = -1, None
    s = lib.opc_run(op.encode(), call.n_in, call.inputs, call.n_attr, call.attrs, n_out, outs, 2, err, 512)
    s2 = lib.opc_infer(op.encode(), call.n_in, call.inputs, call.n_attr, call.attrs, n_out,
                       (L._Shape * n_out)(), err, 512)
    return s, s2, err.value.decode()

a = np.zeros(64, np.float32)
"""

HUGE_CASES = {  # (op, shapes by input position, attributes, status, fragment)
    "seq_times_batch_over_int32": ("LSTMTraining", {0: (1 << 16, 1 << 16, 1), 1: (1, 16, 1), 2: (1, 16, 4)},
                                   {"hidden_size": 4}, 2, "exceed the BLAS's 32-bit dimensions"),
    "element_count_overflow": ("LSTMTraining", {0: (1 << 30, 1 << 30, 1 << 30), 1: (1, 16, 1), 2: (1, 16, 4)},
                               {"hidden_size": 4}, 2, "too large"),
    "r_too_large": ("LSTMTraining", {0: (1, 1, 1), 1: (1, 1 << 26, 1), 2: (1, 1 << 26, 1 << 24)},
                    {"hidden_size": 1 << 24}, 2, "too large"),
    "hidden_size_beyond_limit": ("LSTMTraining", {0: (1, 1, 1), 1: (1, 1 << 31, 1), 2: (1, 1 << 31, 1)},
                                 {"hidden_size": 1 << 29}, 5, "hidden_size must be in [1, 2^28]"),
    "grad_batch_over_int32": ("LSTMGrad", {0: (2, 1 << 31, 1), 1: (1, 16, 1), 2: (1, 16, 4), 6: (2, 1, 1 << 31, 4),
                                           7: (2, 1, 1 << 31, 4), 8: (2, 1, 1 << 31, 16)},
                              {"hidden_size": 4}, 2, "exceed the BLAS's 32-bit dimensions"),
}


@pytest.mark.parametrize("name", sorted(HUGE_CASES))
def test_huge_dimensions_rejected_without_touching_data(name):
    """Huge shapes (over the library's size limits) are rejected by validation, in a fresh process so a crash
    fails the test; the data behind them is 64 floats."""
    op, shapes, attrs, status, frag = HUGE_CASES[name]
    n_in = 8 if op == "LSTMTraining" else 12
    arrays = ["a" if i in shapes else "None" for i in range(n_in)]
    code = HUGE_PRELUDE + f"print(attempt({op!r}, [{', '.join(arrays)}], {shapes!r}, {attrs!r}, {5 if n_in == 8 else 7}))"
    r = run_isolated(code)
    assert r.returncode == 0, f"crashed or raised (rc {r.returncode}): {r.stderr[-2000:]}"
    got, got_infer, msg = eval(r.stdout.strip().splitlines()[-1])  # noqa: S307 (our own printed tuple)
    assert (got, got_infer) == (status, status), msg
    assert frag in msg, msg


@needs_torch
def test_large_hidden_valid_runs(lib, rng):
    """A valid call at an odd large hidden size (several column blocks, the last short) and batch 1."""
    S, nb, I, H = 3, 1, 2, 1031
    ins = make_inputs(rng, S, nb, I, H, 1, scale=1 / np.sqrt(H))
    out = lib.run("LSTMTraining", ins, {"hidden_size": H}, threads=2)
    for g, w, name in zip(out, torch_forward(ins, {"hidden_size": H}), TRAIN_OUT):
        close(g, w, 1e-12, name)
