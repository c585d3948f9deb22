"""ONNX GRU-14 forward in float64, with the saved state GRUTraining (com.microsoft) returns.

Gate order z, r, h throughout: W [D, 3H, I], R [D, 3H, H], B [D, 6H] = [Wbz, Wbr, Wbh, Rbz, Rbr, Rbh].
    z = f(X Wz^T + H Rz^T + Wbz + Rbz)          r = f(X Wr^T + H Rr^T + Wbr + Rbr)
    lbr = 0: h~ = g(X Wh^T + (r * H) Rh^T + Rbh + Wbh)
    lbr = 1: h~ = g(X Wh^T + r * (H Rh^T + Rbh) + Wbh)
    H' = (1 - z) * h~ + z * H
clip bounds the inputs of f and g to [-clip, clip]. Directions: forward, reverse, bidirectional
(D = 2: index 0 forward, 1 reverse). sequence_lens: steps t >= len[b] are skipped for batch entry b,
its Y (HAll) and ZRH rows there are 0 and Y_h holds its last computed state (the reverse direction
starts at step len[b] - 1).
Outputs: HAll [S, D, B, H] (= ONNX Y), Ht [D, B, H] (= ONNX Y_h), ZRH [S, D, B, 3H] holding the
post-activation [z | r | h~] of each step.
"""
from typing import NamedTuple

import numpy as np

from reference._math import sigmoid


class Activation(NamedTuple):
    forward: object         # (x, alpha, beta) -> y
    slope_from_output: object  # (y, alpha, beta) -> dy/dx, for the backward pass on saved outputs
    uses_alpha: bool
    uses_beta: bool
    default_alpha: float | None  # None: no ONNX default, the value must be given
    default_beta: float | None


def _leaky_relu_slope(y, a, b):
    if a < 0:
        raise ValueError(f"LeakyRelu with alpha={a} < 0 is not invertible from its output; no gradient from ZRH")
    return np.where(y > 0, 1.0, a)


def _elu_slope(y, a, b):
    if a < 0:
        raise ValueError(f"Elu with alpha={a} < 0 is not invertible from its output; no gradient from ZRH")
    return np.where(y > 0, 1.0, y + a)


# The ONNX RNN activation list (names case-insensitive); alpha/beta defaults are those of the ONNX op of
# the same name, as the GRU documentation says; Affine and ScaledTanh have no ONNX op, so no default.
ACTIVATIONS = {
    "relu": Activation(lambda x, a, b: np.maximum(x, 0.0), lambda y, a, b: (y > 0).astype(np.float64),
                       False, False, None, None),
    "tanh": Activation(lambda x, a, b: np.tanh(x), lambda y, a, b: 1.0 - y * y, False, False, None, None),
    "sigmoid": Activation(lambda x, a, b: sigmoid(x), lambda y, a, b: y * (1.0 - y), False, False, None, None),
    "affine": Activation(lambda x, a, b: a * x + b, lambda y, a, b: np.full_like(y, a), True, True, None, None),
    "leakyrelu": Activation(lambda x, a, b: np.where(x >= 0, x, a * x), _leaky_relu_slope, True, False, 0.01, None),
    "thresholdedrelu": Activation(lambda x, a, b: np.where(x > a, x, 0.0),  # ONNX ThresholdedRelu: x > alpha
                                  lambda y, a, b: (y != 0).astype(np.float64), True, False, 1.0, None),
    "scaledtanh": Activation(lambda x, a, b: a * np.tanh(b * x),
                             lambda y, a, b: a * b * (1.0 - (y / a) ** 2) if a != 0 else np.zeros_like(y),
                             True, True, None, None),
    "hardsigmoid": Activation(lambda x, a, b: np.clip(a * x + b, 0.0, 1.0),
                              lambda y, a, b: np.where((y > 0) & (y < 1), a, 0.0), True, True, 0.2, 0.5),
    "elu": Activation(lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0.0))), _elu_slope,
                      True, False, 1.0, None),
    "softsign": Activation(lambda x, a, b: x / (1.0 + np.abs(x)), lambda y, a, b: (1.0 - np.abs(y)) ** 2,
                           False, False, None, None),
    "softplus": Activation(lambda x, a, b: np.logaddexp(0.0, x), lambda y, a, b: -np.expm1(-y),
                           False, False, None, None),
}
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


class BoundActivation(NamedTuple):
    name: str
    fn: Activation
    alpha: float
    beta: float

    def __call__(self, x):
        return self.fn.forward(x, self.alpha, self.beta)

    def slope(self, y):
        return self.fn.slope_from_output(y, self.alpha, self.beta)


class GRUConfig(NamedTuple):
    seq: int
    batch: int
    input_size: int
    hidden: int
    directions: int
    reverse: tuple          # per direction: processes t = S-1 .. 0
    acts: tuple             # per direction: (f, g) BoundActivations
    clip: float | None
    lbr: int
    valid: np.ndarray       # [S, B] bool: step t is computed for batch entry b


def _bind_activations(activations, alphas, betas, directions, defaults=("Sigmoid", "Tanh"), roles="f, g"):
    """One tuple of BoundActivations per direction, len(defaults) each (GRU: f, g; LSTM: f, g, h)."""
    k = len(defaults)
    names = list(defaults) * directions if activations is None else list(activations)
    if len(names) != k * directions:
        raise ValueError(f"activations has {len(names)} entries; {k * directions} needed ({roles} per direction)")
    alphas, betas = list(alphas or []), list(betas or [])
    bound = []
    for name in names:
        fn = ACTIVATIONS.get(str(name).lower())
        if fn is None:
            raise ValueError(f"activation {name!r} is not one of the ONNX RNN activations {sorted(ACTIVATIONS)}")
        # alpha and beta lists are consumed in order, only by the functions that take them.
        values = []
        for uses, queue, default, what in ((fn.uses_alpha, alphas, fn.default_alpha, "alpha"),
                                           (fn.uses_beta, betas, fn.default_beta, "beta")):
            if not uses:
                values.append(0.0)
            elif queue:
                values.append(float(queue.pop(0)))
            elif default is not None:
                values.append(default)
            else:
                raise ValueError(f"activation {name} needs an activation_{what} value (it has no ONNX default)")
        bound.append(BoundActivation(str(name), fn, *values))
    # Values left over are ignored, as onnxruntime's GRU does; ONNX does not forbid them.
    return tuple(tuple(bound[k * d:k * (d + 1)]) for d in range(directions))


def gru_shapes(seq, batch, input_size, hidden, directions=1):
    """The shape of every GRUTraining / GRUGrad tensor, by its input or output name."""
    s, b, i, h, d = (int(v) for v in (seq, batch, input_size, hidden, directions))
    return {"X": (s, b, i), "W": (d, 3 * h, i), "R": (d, 3 * h, h), "B": (d, 6 * h), "sequence_lens": (b,),
            "initial_h": (d, b, h), "HAll": (s, d, b, h), "Ht": (d, b, h), "ZRH": (s, d, b, 3 * h),
            "grad_HAll": (s, d, b, h), "grad_Ht": (d, b, h)}


def gru_check(shapes, attrs):
    """One-line message naming what is wrong with these GRU input shapes and attributes, or None.

    `shapes` maps input names (X, W, R, and optionally B, sequence_lens, initial_h, HAll, ZRH,
    grad_HAll, grad_Ht) to shapes; an absent or None entry is an omitted input.
    """
    return rnn_check(shapes, attrs, gru_shapes, flag="linear_before_reset", finals=("Ht",),
                     bind=lambda d: _bind_activations(attrs.get("activations"), attrs.get("activation_alpha"),
                                                      attrs.get("activation_beta"), d))


def rnn_check(shapes, attrs, shapes_of, *, flag, finals, bind):
    """The checks GRU and LSTM share: hidden_size, direction, the 0/1 attribute `flag`, clip, every input
    shape against shapes_of(s, b, i, h, d) (outputs `finals` left out), then bind(d) for the activations."""
    def shape(name):
        value = shapes.get(name)
        return None if value is None else tuple(int(d) for d in value)

    hidden = attrs.get("hidden_size")
    if hidden is None or int(hidden) < 1:
        return f"hidden_size={hidden} must be given and >= 1"
    h = int(hidden)
    direction = attrs.get("direction") or "forward"
    if direction not in DIRECTIONS:
        return f"direction={direction!r} is not one of {', '.join(DIRECTIONS)}"
    d = DIRECTIONS[direction]
    if attrs.get(flag) not in (None, 0, 1):
        return f"{flag}={attrs.get(flag)} must be 0 or 1"
    clip = attrs.get("clip")
    if clip is not None and not float(clip) > 0:
        return f"clip={clip} must be > 0"
    x = shape("X")
    if x is None or len(x) != 3:
        return f"X shape {x} must be [seq_length, batch_size, input_size]"
    s, b, i = x
    expected = shapes_of(s, b, i, h, d)
    for name in ("X", *finals):
        del expected[name]
    for name, want in expected.items():
        got = shape(name)
        if got is None and name in ("W", "R"):
            return f"{name} is required"
        if got is not None and got != want:
            return f"{name} shape {list(got)} != {list(want)} (direction={direction}, hidden_size={h}, X {list(x)})"
    try:
        bind(d)
    except ValueError as err:
        return str(err)
    return None


def gru_config(X, W, R, B, sequence_lens, initial_h, *, hidden_size, direction, activations, activation_alpha,
               activation_beta, clip, linear_before_reset, **saved):
    attrs = dict(hidden_size=hidden_size, direction=direction, activations=activations,
                 activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                 linear_before_reset=linear_before_reset)
    shapes = dict(X=X.shape, W=W.shape, R=R.shape, B=None if B is None else B.shape,
                  sequence_lens=None if sequence_lens is None else np.shape(sequence_lens),
                  initial_h=None if initial_h is None else initial_h.shape)
    shapes.update({k: None if v is None else v.shape for k, v in saved.items()})
    problem = gru_check(shapes, attrs)
    if problem:
        raise ValueError(problem)
    s, b, i = X.shape
    d = DIRECTIONS[direction]
    valid = valid_steps(sequence_lens, s, b)
    reverse = (False, True) if direction == "bidirectional" else (direction == "reverse",)
    acts = _bind_activations(activations, activation_alpha, activation_beta, d)
    return GRUConfig(s, b, i, int(hidden_size), d, reverse, acts, None if clip is None else float(clip),
                     int(linear_before_reset or 0), valid)


def valid_steps(sequence_lens, s, b):
    """[S, B] bool: step t is computed for batch entry b (all, when sequence_lens is omitted)."""
    if sequence_lens is None:
        return np.ones((s, b), dtype=bool)
    lens = np.asarray(sequence_lens)
    if not np.all(lens == np.round(lens)) or lens.min(initial=0) < 0 or lens.max(initial=0) > s:
        raise ValueError(f"sequence_lens {lens.tolist()} must be integers in [0, seq_length={s}]")
    return np.arange(s)[:, None] < lens.astype(np.int64)[None, :]


def clip_pre(a, cfg):
    return a if cfg.clip is None else np.clip(a, -cfg.clip, cfg.clip)


def as_inputs(X, W, R, B, initial_h, cfg):
    """float64 copies with omitted B and initial_h as zeros."""
    X, W, R = (np.asarray(a, dtype=np.float64) for a in (X, W, R))
    B = np.zeros((cfg.directions, 6 * cfg.hidden)) if B is None else np.asarray(B, dtype=np.float64)
    H0 = (np.zeros((cfg.directions, cfg.batch, cfg.hidden)) if initial_h is None
          else np.asarray(initial_h, dtype=np.float64))
    return X, W, R, B, H0


def step_order(cfg, d):
    return range(cfg.seq - 1, -1, -1) if cfg.reverse[d] else range(cfg.seq)


def gru_training(X, W, R, B=None, sequence_lens=None, initial_h=None, *, hidden_size, direction="forward",
                 activations=None, activation_alpha=None, activation_beta=None, clip=None, linear_before_reset=0):
    """(HAll [S, D, B, H], Ht [D, B, H], ZRH [S, D, B, 3H]) of an ONNX GRU; see the module docstring."""
    X, W, R, B, initial_h = (None if a is None else np.asarray(a, dtype=np.float64)
                             for a in (X, W, R, B, initial_h))
    cfg = gru_config(X, W, R, B, sequence_lens, initial_h, hidden_size=hidden_size, direction=direction,
                     activations=activations, activation_alpha=activation_alpha, activation_beta=activation_beta,
                     clip=clip, linear_before_reset=linear_before_reset)
    X, W, R, B, H0 = as_inputs(X, W, R, B, initial_h, cfg)
    S, Bn, H, D = cfg.seq, cfg.batch, cfg.hidden, cfg.directions
    HAll = np.zeros((S, D, Bn, H))
    ZRH = np.zeros((S, D, Bn, 3 * H))
    Ht = np.zeros((D, Bn, H))
    for d in range(D):
        f, g = cfg.acts[d]
        Rzr, Rh = R[d, :2 * H], R[d, 2 * H:]
        Wb, Rb = B[d, :3 * H], B[d, 3 * H:]
        xw = X @ W[d].T + Wb                      # [S, B, 3H]: the input part of all steps at once
        state = H0[d]
        for t in step_order(cfg, d):
            zr = f(clip_pre(xw[t, :, :2 * H] + state @ Rzr.T + Rb[:2 * H], cfg))
            z, r = zr[:, :H], zr[:, H:]
            if cfg.lbr:
                a_h = xw[t, :, 2 * H:] + r * (state @ Rh.T + Rb[2 * H:])
            else:
                a_h = xw[t, :, 2 * H:] + (r * state) @ Rh.T + Rb[2 * H:]
            h_cand = g(clip_pre(a_h, cfg))
            new = (1.0 - z) * h_cand + z * state
            live = cfg.valid[t][:, None]
            HAll[t, d] = np.where(live, new, 0.0)
            ZRH[t, d] = np.where(live, np.concatenate([zr, h_cand], axis=1), 0.0)
            state = np.where(live, new, state)
        Ht[d] = state
    return HAll, Ht, ZRH


def gru_case_shapes(params):
    """GRUTraining / GRUGrad shapes from case parameters {seq, batch, input_size, hidden_size, direction?}.

    The sequence_lens input is left out (None) unless params has `with_sequence_lens: true`: most backends
    reject it, so cases give it only where they mean to.
    """
    directions = 2 if params.get("direction") == "bidirectional" else 1
    shapes = gru_shapes(params["seq"], params["batch"], params["input_size"], params["hidden_size"], directions)
    if not params.get("with_sequence_lens"):
        shapes["sequence_lens"] = None
    return shapes
