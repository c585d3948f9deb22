"""AdamOptimizer (com.microsoft): one Adam step on one parameter, with ORT's two weight-decay modes.

Not the gradient of a forward op: the optimizer graph of ORT's (legacy) training frontend runs it once per parameter
and step. Over a trajectory new_T feeds T, new_moment_1 feeds moment_1, new_moment_2 feeds moment_2, new_weights
feeds weights and new_mixed_precision_weights feeds mixed_precision_weights at the next step; R, gradients,
loss_scale, global_gradient_norm and update_signal are fresh inputs each step. T is the 1-based index of this
update (the first call takes T = 1); new_T = T + 1.

The gradient is first unscaled and clipped: with s = loss_scale (1 when absent) and n = global_gradient_norm (the
norm of the loss-scaled gradients), g = gradients / d where d = n / max_norm_clip when n > s * max_norm_clip, else
d = s. Then, with the bias corrections c1 = 1 - alpha^T, c2 = 1 - beta^T (both 1 when do_bias_correction is 0 or
T < 1):
  m1' = alpha * m1 + (1 - alpha) * g,  m2' = beta * m2 + (1 - beta) * g^2
  weight_decay_mode 0: delta = -R * ((m1' / c1) / (sqrt(m2' / c2) + epsilon) + lambda * weights)
      = torch.optim.AdamW(lr=R, betas=(alpha, beta), eps=epsilon, weight_decay=lambda) (torch.optim.Adam when
        lambda = 0) with do_bias_correction 1: torch decays the weight first, W(1 - R lambda), then subtracts R times
        the Adam direction, which does not depend on W.
  weight_decay_mode 1: u = (R * sqrt(c2) / c1) * m1' / (sqrt(m2') + epsilon); delta = -u - R * lambda * (weights - u)
      (the AdamW of Hugging Face transformers before its removal: epsilon outside the bias correction, the decay
       applied to the already-updated weight; no torch.optim equivalent)
  new_weights = weights + delta, new_gradients = delta (the update applied, not the gradient),
  new_mixed_precision_weights = new_weights rounded to the mixed-precision type.
update_signal false skips the step: every output is its input (new_T = T, moments, weights, gradients and
mixed-precision weights unchanged). Proven in tests/test_adam_torch.py against torch.optim over 10 float64 steps.
"""
import numpy as np

ATTRS = ("alpha", "beta", "lambda", "epsilon", "max_norm_clip", "do_bias_correction", "weight_decay_mode")


def _one(x, default):
    return default if x is None else float(np.asarray(x, dtype=np.float64).reshape(-1)[0])


def grad_divisor(loss_scale, global_gradient_norm, max_norm_clip):
    """d with g = gradients / d: the loss scale, or the clipping divisor n / max_norm_clip when n > s * max_norm_clip."""
    s = _one(loss_scale, 1.0)
    n = global_gradient_norm
    if n is not None:
        n = _one(n, 0.0)
        if n > s * max_norm_clip:
            return n / max_norm_clip
    return s


def adam(R, T, weights, gradients, moment_1, moment_2, mixed_precision_weights=None, loss_scale=None,
         global_gradient_norm=None, update_signal=None, **attrs):
    """Return (new_T, new_moment_1, new_moment_2, new_weights, new_gradients, new_mixed_precision_weights) in
    float64 (new_T int64; the last is asked for only with mixed_precision_weights)."""
    alpha = float(attrs.get("alpha", 0.9))
    beta = float(attrs.get("beta", 0.999))
    lam = float(attrs.get("lambda", 0.0))
    eps = float(attrs.get("epsilon", 1e-8))
    max_norm = float(attrs.get("max_norm_clip", 1.0))
    bias = int(attrs.get("do_bias_correction", 1))
    mode = int(attrs.get("weight_decay_mode", 0))
    step_in = np.asarray(T, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    m1 = np.asarray(moment_1, dtype=np.float64)
    m2 = np.asarray(moment_2, dtype=np.float64)
    mp = None if mixed_precision_weights is None else np.asarray(mixed_precision_weights, dtype=np.float64)
    if update_signal is not None and not bool(np.asarray(update_signal).reshape(-1)[0]):
        return step_in.copy(), m1, m2, w, np.asarray(gradients, dtype=np.float64), (w if mp is None else mp)
    eta = _one(R, 0.0)
    step = int(step_in.reshape(-1)[0])
    g = np.asarray(gradients, dtype=np.float64) / grad_divisor(loss_scale, global_gradient_norm, max_norm)
    m1n = alpha * m1 + (1.0 - alpha) * g
    m2n = beta * m2 + (1.0 - beta) * g * g
    c1 = 1.0 - alpha ** step if bias and step > 0 else 1.0
    c2 = 1.0 - beta ** step if bias and step > 0 else 1.0
    with np.errstate(all="ignore"):
        if mode == 0:
            delta = -eta * ((m1n / c1) / (np.sqrt(m2n / c2) + eps) + lam * w)
        else:
            u = (eta * np.sqrt(c2) / c1) * m1n / (np.sqrt(m2n) + eps)
            delta = -u - eta * lam * (w - u)
    nw = w + delta
    # the float16 copy, rounded once from the exact new weights (the sixth output is only asked for with mp)
    return step_in + 1, m1n, m2n, nw, delta, nw.astype(np.float16).astype(np.float64)


def adam_plain(R, T, weights, gradients, moment_1, moment_2, mixed_precision_weights=None, loss_scale=None,
               global_gradient_norm=None, update_signal=None, **attrs):
    """A plausible wrong semantics: loss_scale, global_gradient_norm and update_signal ignored (ORT's CPU kernel)."""
    out = adam(R, T, weights, gradients, moment_1, moment_2, None, None, None, None, **attrs)
    return out


def adam_check(shapes, attributes):
    """valid_if: gradients, moments and mixed-precision weights have weights' shape; the attributes in range."""
    ws = tuple(shapes["weights"])
    for name in ("gradients", "moment_1", "moment_2", "mixed_precision_weights"):
        if shapes.get(name) is not None and tuple(shapes[name]) != ws:
            return f"{name} has shape {list(shapes[name])}, weights {list(ws)}: they must be equal"
    for name in ("R", "T", "loss_scale", "global_gradient_norm", "update_signal"):
        if shapes.get(name) is not None and int(np.prod(shapes[name], dtype=np.int64)) != 1:
            return f"{name} has shape {list(shapes[name])}; it must hold one value"
    return None


def bench_bytes(shapes, attributes):
    """weights, gradients, moment_1, moment_2 read; new moments, new_weights written, float32 (new_gradients when
    the bench asks for it: every size does)."""
    return 4 * 8 * int(np.prod(shapes["weights"], dtype=np.int64))


def bench_torch(inputs, attributes):
    """torch.optim.AdamW(foreach=True).step() on one float32 parameter with its state set to the inputs' moments."""
    import torch

    from reference._torch import tensors

    eta = float(np.asarray(inputs[0]).reshape(-1)[0])
    w, g, m1, m2 = tensors(inputs[2], inputs[3], inputs[4], inputs[5])
    p = torch.nn.Parameter(w.clone())
    p.grad = g.clone()
    opt = torch.optim.AdamW([p], lr=eta, betas=(attributes.get("alpha", 0.9), attributes.get("beta", 0.999)),
                            eps=attributes.get("epsilon", 1e-8), weight_decay=attributes.get("lambda", 0.0),
                            foreach=True)
    opt.state[p] = {"step": torch.tensor(float(np.asarray(inputs[1]).reshape(-1)[0])),
                    "exp_avg": m1.clone(), "exp_avg_sq": m2.clone()}
    return opt.step


def from_node(node):
    """weights' shape, and the optional inputs the node leaves out (omit)."""
    params = {"shape": list(node.shape("weights"))}
    params["omit"] = [n for n in ("mixed_precision_weights", "loss_scale", "global_gradient_norm", "update_signal")
                      if node.shapes.get(n) is None]
    return params
