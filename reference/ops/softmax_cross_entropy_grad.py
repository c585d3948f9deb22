"""SoftmaxCrossEntropyGrad (com.microsoft): the VJP of reference.forward.softmax_cross_entropy_grad in its logits.

With p = exp(log_prob) (softmax over the last axis), y = label and s_r the per-row scale:
    d_logits[r, :] = s_r * (p[r, :] * sum_c y[r, c] - y[r, :])
    s_r = dY_r (none), dY (sum), dY / R (mean, R the number of rows)
For a one-hot or probability label (each row summing to 1) this is s_r * (p - y).
"""
import numpy as np

from reference.forward.softmax_cross_entropy_grad import reduction_problem


def check_shapes(shapes, attributes) -> str | None:
    """valid_if hook: log_prob [..., C], label of its shape, dY [] (mean, sum) or log_prob's shape without C (none)."""
    lp, label, dY = tuple(shapes["log_prob"]), tuple(shapes["label"]), tuple(shapes["dY"])
    reduction = attributes.get("reduction", "mean")
    problem = reduction_problem(reduction)
    if problem:
        return problem
    if len(lp) < 1:
        return f"log_prob must have rank >= 1 ([..., C]), got shape {list(lp)}"
    if label != lp:
        return f"label shape {list(label)} != log_prob shape {list(lp)}"
    want = lp[:-1] if reduction == "none" else ()
    if dY != want:
        return f"dY shape {list(dY)} != {list(want)} (reduction {reduction!r})"
    return None


def softmax_cross_entropy_grad(dY, log_prob, label, *, reduction="mean"):
    """Return d_logits in float64."""
    lp = np.asarray(log_prob, dtype=np.float64)
    dY = np.asarray(dY, dtype=np.float64)
    problem = check_shapes({"dY": dY.shape, "log_prob": lp.shape, "label": np.shape(label)}, {"reduction": reduction})
    if problem:
        raise ValueError(problem)
    y = np.asarray(label, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        rows = int(np.prod(lp.shape[:-1]))
        scale = dY if reduction == "none" else (dY / rows if reduction == "mean" else dY)
        scale = np.broadcast_to(scale, lp.shape[:-1])
        return (np.exp(lp) * np.sum(y, axis=-1, keepdims=True) - y) * scale[..., None]


def case_shapes(params) -> dict:
    """cases.shapes hook: `shape` is logits' (= log_prob's = label's); dY a scalar unless reduction is none."""
    shape = tuple(params["shape"])
    dY = shape[:-1] if params.get("reduction", "mean") == "none" else ()
    return {"logits": shape, "label": shape, "dY": dY}


# ---- plausible wrong semantics -----------------------------------------------------------------------------

def p_minus_label(dY, log_prob, label, *, reduction="mean"):
    """s * (p - y): the gradient only where each label row sums to 1 (ORT's float32 kernel)."""
    y = np.asarray(label, dtype=np.float64)
    total = np.sum(y, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return softmax_cross_entropy_grad(dY, log_prob, y / np.where(total == 0, 1, total), reduction=reduction) * \
            np.where(total == 0, 1, total)


# ---- bench ---------------------------------------------------------------------------------------------------

def bench_bytes(shapes, attributes):
    """log_prob and label read, d_logits written (float32)."""
    return 3 * int(np.prod(shapes["log_prob"], dtype=np.int64)) * 4


def bench_torch(inputs, attributes):
    """ATen's cross_entropy backward with probability targets: the gradient of log_prob (-y * dY / R), then
    _log_softmax_backward_data (g - p * sum(g))."""
    import torch

    from reference._torch import tensors

    dy, log_prob, label = tensors(*inputs)
    rows = log_prob.numel() // log_prob.shape[-1]
    scale = dy / rows if attributes.get("reduction", "mean") == "mean" else dy
    aten = torch.ops.aten
    return lambda: aten._log_softmax_backward_data(label * -scale, log_prob, -1, torch.float32)


# ---- model: a real graph's node -> case params -----------------------------------------------------------------

def from_node(node):
    """`shape` is log_prob's (= label's = the forward logits')."""
    return {"shape": list(node.shape("log_prob"))}
