"""ONNX LSTM-14 forward in float64, with the saved state LSTMTraining (com.microsoft) returns.

Gate order i, o, f, c throughout: W [D, 4H, I], R [D, 4H, H], B [D, 8H] = [Wbi Wbo Wbf Wbc, Rbi Rbo Rbf Rbc],
P [D, 3H] = [Pi, Po, Pf] (peepholes). With a_* = X Wx^T + H Rx^T + Wbx + Rbx:
    i = f(a_i + Pi * C)      f_ = f(a_f + Pf * C)  (input_forget = 1: f_ = 1 - i)      c~ = g(a_c)
    C' = f_ * C + i * c~     o = f(a_o + Po * C')     H' = o * h(C')
clip bounds every gate pre-activation (peephole term included) to [-clip, clip] before f and g, never the
argument of h. Directions, sequence_lens and the activation table are those of reference.forward.gru:
steps t >= len[b] are skipped for batch entry b, their HAll, CAll and IOFC rows are 0, Ht and Ct hold the
state after the last computed step (initial_h / initial_c when len is 0); reverse runs t = len - 1 .. 0.
Outputs: HAll [S, D, B, H] (= ONNX Y), Ht [D, B, H] (Y_h), Ct [D, B, H] (Y_c), CAll [S, D, B, H] (every
cell state), IOFC [S, D, B, 4H] holding the post-activation [i | o | f_ | c~] of each step.
"""
from typing import NamedTuple

import numpy as np

from reference.forward.gru import DIRECTIONS, _bind_activations, clip_pre, rnn_check, step_order, valid_steps

LSTM_DEFAULT_ACTIVATIONS = ("Sigmoid", "Tanh", "Tanh")


class LSTMConfig(NamedTuple):
    seq: int
    batch: int
    input_size: int
    hidden: int
    directions: int
    reverse: tuple          # per direction: processes t = S-1 .. 0
    acts: tuple             # per direction: (f, g, h) BoundActivations
    clip: float | None
    input_forget: int
    valid: np.ndarray       # [S, B] bool: step t is computed for batch entry b


def lstm_shapes(seq, batch, input_size, hidden, directions=1):
    """The shape of every LSTMTraining / LSTMGrad tensor, by its input or output name."""
    s, b, i, h, d = (int(v) for v in (seq, batch, input_size, hidden, directions))
    state = (d, b, h)
    return {"X": (s, b, i), "W": (d, 4 * h, i), "R": (d, 4 * h, h), "B": (d, 8 * h), "sequence_lens": (b,),
            "initial_h": state, "initial_c": state, "P": (d, 3 * h), "HAll": (s, d, b, h), "Ht": state,
            "Ct": state, "CAll": (s, d, b, h), "IOFC": (s, d, b, 4 * h), "grad_HAll": (s, d, b, h),
            "grad_Ht": state, "grad_Ct": state}


def _bind(attrs, directions):
    return _bind_activations(attrs.get("activations"), attrs.get("activation_alpha"), attrs.get("activation_beta"),
                             directions, LSTM_DEFAULT_ACTIVATIONS, "f, g, h")


def lstm_check(shapes, attrs):
    """One-line message naming what is wrong with these LSTM input shapes and attributes, or None.

    `shapes` maps input names (X, W, R, and optionally B, sequence_lens, initial_h, initial_c, P, HAll, CAll,
    IOFC, grad_HAll, grad_Ht, grad_Ct) to shapes; an absent or None entry is an omitted input.
    """
    return rnn_check(shapes, attrs, lstm_shapes, flag="input_forget", finals=("Ht", "Ct"),
                     bind=lambda d: _bind(attrs, d))


def lstm_grad_check(shapes, attrs):
    """lstm_check, and no clip: LSTMGrad takes neither B nor the pre-activations, so the entries a clip
    bounded (slope 0) cannot be told from the saved gate values; backends must reject it."""
    problem = lstm_check(shapes, attrs)
    if problem is None and attrs.get("clip") is not None:
        return (f"clip={attrs['clip']} is not allowed on LSTMGrad: without B and the pre-activations the clipped "
                "entries cannot be recovered from the saved state")
    return problem


def lstm_values_check(inputs, attrs):
    """valid_values: sequence_lens entries must lie in [0, seq_length]."""
    lens, X = inputs.get("sequence_lens"), inputs.get("X")
    if lens is None or X is None or np.ndim(X) != 3:
        return None
    lens = np.asarray(lens)
    s = np.shape(X)[0]
    if lens.size and (lens.min() < 0 or lens.max() > s):
        return f"sequence_lens {lens.tolist()} must lie in [0, seq_length={s}]"
    return None


def lstm_config(X, W, R, sequence_lens, *, hidden_size, direction, activations, activation_alpha,
                activation_beta, clip, input_forget, check=lstm_check, **others):
    """The validated configuration; `others` are the remaining tensors (None when omitted), for the shape check."""
    attrs = dict(hidden_size=hidden_size, direction=direction, activations=activations,
                 activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                 input_forget=input_forget)
    shapes = dict(X=X.shape, W=W.shape, R=R.shape, sequence_lens=None if sequence_lens is None else np.shape(sequence_lens))
    shapes.update({k: None if v is None else np.shape(v) for k, v in others.items()})
    problem = check(shapes, attrs)
    if problem:
        raise ValueError(problem)
    s, b, i = X.shape
    d = DIRECTIONS[direction]
    reverse = (False, True) if direction == "bidirectional" else (direction == "reverse",)
    return LSTMConfig(s, b, i, int(hidden_size), d, reverse, _bind(attrs, d), None if clip is None else float(clip),
                      int(input_forget or 0), valid_steps(sequence_lens, s, b))


def as_state(value, cfg):
    """initial_h / initial_c as float64, zeros when omitted."""
    return np.zeros((cfg.directions, cfg.batch, cfg.hidden)) if value is None else np.asarray(value, dtype=np.float64)


def lstm_training(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *, hidden_size,
                  direction="forward", activations=None, activation_alpha=None, activation_beta=None, clip=None,
                  input_forget=0):
    """(HAll [S, D, B, H], Ht [D, B, H], Ct [D, B, H], CAll [S, D, B, H], IOFC [S, D, B, 4H]) of an ONNX
    LSTM; see the module docstring."""
    X, W, R, B, initial_h, initial_c, P = (None if a is None else np.asarray(a, dtype=np.float64)
                                           for a in (X, W, R, B, initial_h, initial_c, P))
    cfg = lstm_config(X, W, R, sequence_lens, hidden_size=hidden_size, direction=direction, activations=activations,
                      activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                      input_forget=input_forget, B=B, initial_h=initial_h, initial_c=initial_c, P=P)
    S, Bn, H, D = cfg.seq, cfg.batch, cfg.hidden, cfg.directions
    B = np.zeros((D, 8 * H)) if B is None else B
    H0, C0 = as_state(initial_h, cfg), as_state(initial_c, cfg)
    HAll, CAll = np.zeros((S, D, Bn, H)), np.zeros((S, D, Bn, H))
    IOFC = np.zeros((S, D, Bn, 4 * H))
    Ht, Ct = np.zeros((D, Bn, H)), np.zeros((D, Bn, H))
    for d in range(D):
        f, g, h = cfg.acts[d]
        def peep(k, c, d=d):  # P's k-th block [i, o, f] times c; no term at all without P (0 * inf is NaN)
            return 0.0 if P is None else P[d, k * H:(k + 1) * H] * c

        xw = X @ W[d].T + B[d, :4 * H] + B[d, 4 * H:]   # [S, B, 4H]: input part and both biases, all steps
        hs, cs = H0[d], C0[d]
        for t in step_order(cfg, d):
            a = xw[t] + hs @ R[d].T
            i = f(clip_pre(a[:, :H] + peep(0, cs), cfg))
            forget = 1.0 - i if cfg.input_forget else f(clip_pre(a[:, 2 * H:3 * H] + peep(2, cs), cfg))
            cand = g(clip_pre(a[:, 3 * H:], cfg))
            c_new = forget * cs + i * cand
            o = f(clip_pre(a[:, H:2 * H] + peep(1, c_new), cfg))
            h_new = o * h(c_new)
            live = cfg.valid[t][:, None]
            HAll[t, d] = np.where(live, h_new, 0.0)
            CAll[t, d] = np.where(live, c_new, 0.0)
            IOFC[t, d] = np.where(live, np.concatenate([i, o, forget, cand], axis=1), 0.0)
            hs, cs = np.where(live, h_new, hs), np.where(live, c_new, cs)
        Ht[d], Ct[d] = hs, cs
    return HAll, Ht, Ct, CAll, IOFC


def lstm_case_shapes(params):
    """LSTMTraining shapes from case parameters {seq, batch, input_size, hidden_size, direction?}.

    sequence_lens is left out (None) unless params has `with_sequence_lens: true`, and the peepholes P
    unless `with_peepholes: true` (ONNX's default LSTM has none), so cases give them only where they mean to.
    """
    directions = 2 if params.get("direction") == "bidirectional" else 1
    shapes = lstm_shapes(params["seq"], params["batch"], params["input_size"], params["hidden_size"], directions)
    if not params.get("with_sequence_lens"):
        shapes["sequence_lens"] = None
    if not params.get("with_peepholes"):
        shapes["P"] = None
    return shapes
