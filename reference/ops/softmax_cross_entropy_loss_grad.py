"""SoftmaxCrossEntropyLossGrad (com.microsoft): the VJP of reference.forward.softmax_cross_entropy in its scores.

With p = exp(log_prob) (the softmax over the class axis 1), w_i the weight of element i's label and W the
sum of w_i over the elements that are not ignored:
    d_logits[i, :] = s_i * (p[i, :] - onehot(label_i)),   s_i = dY_i * w_i (none), dY * w_i (sum), dY * w_i / W (mean)
and exactly 0 for an ignored element (selected, not multiplied: no NaN or inf in dY reaches it). When every
element is ignored every row is 0, also for mean, whose loss is then 0/0: the loss does not depend on the
scores. Non-ignored elements whose weights sum to W = 0 under mean get 0 / 0 = NaN, as the loss does.
"""
import numpy as np

from reference.forward.softmax_cross_entropy import label_problem, per_element, shape_problem


def check_values(inputs, attributes) -> str | None:
    """valid_values hook: every label is in [0, C) or equals ignore_index."""
    log_prob, label = inputs.get("log_prob"), inputs.get("label")
    if log_prob is None or label is None or log_prob.ndim < 2:
        return None
    return label_problem(label, log_prob.shape[1], attributes.get("ignore_index"))


def check_shapes(shapes, attributes) -> str | None:
    """valid_if hook: log_prob [N, C, d..], label [N, d..], weight [C], dY [] (mean, sum) or label's shape (none)."""
    log_prob, label, dY = shapes["log_prob"], shapes["label"], shapes["dY"]
    problem = shape_problem(log_prob, label, shapes.get("weight"))
    if problem:
        return problem.replace("scores", "log_prob")
    want = tuple(label) if attributes.get("reduction") == "none" else ()
    if tuple(dY) != want:
        return f"dY shape {list(dY)} != {list(want)} (reduction {attributes.get('reduction')!r})"
    return None


def softmax_cross_entropy_loss_grad(dY, log_prob, label, weight=None, *, reduction="mean", ignore_index=None):
    """Return d_logits in float64."""
    lp = np.asarray(log_prob, dtype=np.float64)
    dY = np.asarray(dY, dtype=np.float64)
    problem = check_shapes({"dY": dY.shape, "log_prob": lp.shape, "label": np.shape(label),
                            "weight": None if weight is None else np.shape(weight)}, {"reduction": reduction})
    problem = problem or label_problem(label, lp.shape[1], ignore_index)
    if problem:
        raise ValueError(problem)
    ignored, safe, w = per_element(label, lp.shape[1], weight, ignore_index)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        scale = dY * w
        if reduction == "mean":
            scale = scale / np.sum(w)
        onehot = np.arange(lp.shape[1]).reshape(1, -1, *([1] * (lp.ndim - 2))) == safe[:, None]
        d = (np.exp(lp) - onehot) * scale[:, None]
    return np.where(ignored[:, None], 0.0, d)


def case_shapes(params) -> dict:
    """cases.shapes hook: the `shape` param is the scores' (and log_prob's) [N, C, d1..dk]; label [N, d1..dk],
    weight [C], dY a scalar for mean and sum (the default reduction is mean) and label's shape for none."""
    scores = tuple(params["shape"])
    label = (scores[0], *scores[2:])
    dY = label if params.get("reduction", "mean") == "none" else ()
    return {"scores": scores, "label": label, "weight": (scores[1],), "dY": dY}


# ---- plausible wrong semantics (alternative_semantics: what a failing kernel computes) ----

def mean_over_count(dY, log_prob, label, weight=None, *, reduction="mean", ignore_index=None):
    """mean divided by the number of elements not ignored, whatever their weights (PyTorch's rule without weights)."""
    if reduction != "mean" or weight is None:
        return softmax_cross_entropy_loss_grad(dY, log_prob, label, weight, reduction=reduction, ignore_index=ignore_index)
    ignored, _, w = per_element(label, np.shape(log_prob)[1], weight, ignore_index)
    count = np.sum(~ignored)
    return softmax_cross_entropy_loss_grad(np.asarray(dY, dtype=np.float64) * np.sum(w) / count, log_prob, label,
                                           weight, reduction=reduction, ignore_index=ignore_index)


def ignored_rows_multiplied(dY, log_prob, label, weight=None, *, reduction="mean", ignore_index=None):
    """Ignored rows as (p - onehot) * dY * 0 rather than a select of 0: NaN or inf in dY, or mean's 0/0, reach them."""
    lp = np.asarray(log_prob, dtype=np.float64)
    ignored, safe, w = per_element(label, lp.shape[1], weight, ignore_index)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        scale = np.asarray(dY, dtype=np.float64) * w
        if reduction == "mean":
            scale = scale / np.sum(w)
        onehot = np.arange(lp.shape[1]).reshape(1, -1, *([1] * (lp.ndim - 2))) == safe[:, None]
        return (np.exp(lp) - onehot) * scale[:, None]


# ---- bench: the cost of one call and torch's kernel for `opconform bench` (the specs' bench sections) -------------

def bench_bytes(shapes, attributes):
    """log_prob read, d_logits written (the labels are small)."""
    return 2 * int(np.prod(shapes["log_prob"])) * 4


def bench_torch(inputs, attributes):
    """ATen's cross_entropy backward, its two kernels: nll_loss_backward (mean over the labels not ignored,
    total_weight from the forward, computed outside the timing), then _log_softmax_backward_data."""
    import torch

    from reference._torch import tensors

    dy, log_prob, label, _ = tensors(*inputs)
    ignore = attributes.get("ignore_index")
    ignore = -100 if ignore is None else int(ignore)  # no ignore_index: torch's default, which no label in [0, C) is
    total = (label != ignore).sum().to(torch.float32)
    reduction = {"none": 0, "mean": 1, "sum": 2}[attributes.get("reduction") or "mean"]
    aten = torch.ops.aten
    return lambda: aten._log_softmax_backward_data(
        aten.nll_loss_backward(dy, log_prob, label, None, reduction, ignore, total), log_prob, 1, torch.float32)


# ---- model: a real graph's node -> case params (cases.from_node) -----------------------------------------------

def from_node(node):
    """`shape` is the scores' (= log_prob's) [N, C, d1..dk]; Tind the label's dtype when it is not int64."""
    params = {"shape": list(node.shape("log_prob"))}
    if node.dtypes.get("label", "int64") != "int64":
        params["Tind"] = node.dtypes["label"]
    return params
