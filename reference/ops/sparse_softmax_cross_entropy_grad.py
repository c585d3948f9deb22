"""SparseSoftmaxCrossEntropyGrad (ONNX domain, since 9): the VJP of reference.forward.sparse_softmax_cross_entropy_grad
in its logits.

With p = exp(log_prob) (softmax over the last axis), w_i = weight[i] (1 without weight):
    d_logits[i, :] = s_i * (p[i, :] - onehot(label_i))
    s_i = dY_i * w_i (none), dY * w_i (sum), dY * w_i / sum_j w_j (mean; / n without weight: 0/0 = NaN)
"""
import numpy as np

from reference.forward.softmax_cross_entropy_grad import reduction_problem
from reference.forward.sparse_softmax_cross_entropy_grad import label_problem, shape_problem


def check_shapes(shapes, attributes) -> str | None:
    """valid_if hook: log_prob [..., C], label its shape without C, weight label's, dY [] or label's (none)."""
    reduction = attributes.get("reduction", "mean")
    problem = reduction_problem(reduction)
    problem = problem or shape_problem(shapes["log_prob"], shapes["label"], shapes.get("weight"))
    if problem:
        return problem.replace("logits", "log_prob")
    want = tuple(shapes["label"]) if reduction == "none" else ()
    if tuple(shapes["dY"]) != want:
        return f"dY shape {list(shapes['dY'])} != {list(want)} (reduction {reduction!r})"
    return None


def check_values(inputs, attributes) -> str | None:
    """valid_values hook: every label in [0, C)."""
    lp, label = inputs.get("log_prob"), inputs.get("label")
    if lp is None or label is None or np.ndim(lp) < 1:
        return None
    return label_problem(label, np.shape(lp)[-1])


def sparse_softmax_cross_entropy_grad(dY, log_prob, label, weight=None, *, reduction="mean"):
    """Return d_logits in float64."""
    lp = np.asarray(log_prob, dtype=np.float64)
    dY = np.asarray(dY, dtype=np.float64)
    problem = check_shapes({"dY": dY.shape, "log_prob": lp.shape, "label": np.shape(label),
                            "weight": None if weight is None else np.shape(weight)}, {"reduction": reduction})
    problem = problem or label_problem(label, lp.shape[-1])
    if problem:
        raise ValueError(problem)
    lab = np.asarray(label).astype(np.int64)
    w = np.ones(lab.shape) if weight is None else np.asarray(weight, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        scale = dY * w
        if reduction == "mean":
            scale = scale / np.sum(w)
        onehot = np.arange(lp.shape[-1]) == lab[..., None]
        return (np.exp(lp) - onehot) * scale[..., None]


def case_shapes(params) -> dict:
    """cases.shapes hook: `shape` is logits' (= log_prob's) [..., C]; label and weight without C; dY [] or label's."""
    shape = tuple(params["shape"])
    dY = shape[:-1] if params.get("reduction", "mean") == "none" else ()
    return {"logits": shape, "label": shape[:-1], "weight": shape[:-1], "dY": dY}


# ---- plausible wrong semantics -----------------------------------------------------------------------------

def none_reads_first_dy(dY, log_prob, label, weight=None, *, reduction="mean"):
    """reduction none scaled by dY's first element for every row (ORT's float32 kernel)."""
    if reduction == "none":
        dY = np.full(np.shape(dY), np.asarray(dY, dtype=np.float64).reshape(-1)[0] if np.size(dY) else 0.0)
    return sparse_softmax_cross_entropy_grad(dY, log_prob, label, weight, reduction=reduction)


# ---- bench ---------------------------------------------------------------------------------------------------

def bench_bytes(shapes, attributes):
    """log_prob read, d_logits written (float32; the labels are small)."""
    return 2 * int(np.prod(shapes["log_prob"], dtype=np.int64)) * 4


def bench_torch(inputs, attributes):
    """ATen's cross_entropy backward with class indices: nll_loss_backward (total weight computed outside the
    timing), then _log_softmax_backward_data."""
    import torch

    from reference._torch import tensors

    dy, log_prob, label, _ = tensors(*inputs)
    lp2 = log_prob.view(-1, log_prob.shape[-1])
    lab = label.view(-1)
    red = {"none": 0, "mean": 1, "sum": 2}[attributes.get("reduction", "mean")]
    total = torch.tensor(float(lab.numel()), dtype=torch.float32)
    aten = torch.ops.aten
    return lambda: aten._log_softmax_backward_data(
        aten.nll_loss_backward(dy, lp2, lab, None, red, -100, total), lp2, 1, torch.float32)


# ---- model: a real graph's node -> case params -----------------------------------------------------------------

def from_node(node):
    """`shape` is log_prob's (the forward logits') [..., C]; Tind the label's dtype when it is not int64."""
    params = {"shape": list(node.shape("log_prob"))}
    if node.dtypes.get("label", "int64") != "int64":
        params["Tind"] = node.dtypes["label"]
    return params
