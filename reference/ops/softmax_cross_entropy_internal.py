"""SoftmaxCrossEntropyLossInternal and SoftmaxCrossEntropyLossInternalGrad (com.microsoft): ai.onnx
SoftmaxCrossEntropyLoss and its gradient with ignore_index an optional int64 scalar input (absent: no label is
ignored), an output_type attribute and, on the gradient, an optional bias added to d_logits (what
SceLossGradBiasFusion folds in from a following Sum/Add).

The math is the ai.onnx op's (reference.forward.softmax_cross_entropy, reference.ops.softmax_cross_entropy_loss_grad):
    d_logits[i, :] = s_i * (p[i, :] - onehot(label_i)) + bias[i, :],  s_i = dY_i w_i (none), dY w_i (sum), dY w_i / W (mean)
an ignored element's row is exactly bias (its own part is a select of 0, not 0 * dY).
"""
import numpy as np

from reference.forward.softmax_cross_entropy import label_problem, shape_problem
from reference.forward.softmax_cross_entropy_internal import (
    ignore_value,
    softmax_cross_entropy_loss_internal,
)
from reference.ops.softmax_cross_entropy_loss_grad import (
    bench_bytes as _grad_bench_bytes,
)
from reference.ops.softmax_cross_entropy_loss_grad import (
    check_shapes as _grad_check_shapes,
)
from reference.ops.softmax_cross_entropy_loss_grad import (
    softmax_cross_entropy_loss_grad,
)

__all__ = ["softmax_cross_entropy_loss_internal"]  # SoftmaxCrossEntropyLossInternal's reference (no forward op)


def _ignore_problem(ignore_index) -> str | None:
    if ignore_index is not None and tuple(ignore_index) != ():
        return f"ignore_index must be a scalar, got shape {list(ignore_index)}"
    return None


# ---- SoftmaxCrossEntropyLossInternal (a computation of its own) --------------------------------------------------

def forward_check_shapes(shapes, attributes) -> str | None:
    """valid_if: scores [N, C, d..], labels [N, d..], weights [C], ignore_index []."""
    return (shape_problem(shapes["scores"], shapes["labels"], shapes.get("weights"))
            or _ignore_problem(shapes.get("ignore_index")))


def forward_check_values(inputs, attributes) -> str | None:
    """valid_values: every label in [0, C) or equal to the ignore_index input."""
    scores, labels = inputs.get("scores"), inputs.get("labels")
    if scores is None or labels is None or np.ndim(scores) < 2 or np.ndim(inputs.get("ignore_index", 0)) != 0:
        return None
    return label_problem(labels, np.shape(scores)[1], ignore_value(inputs.get("ignore_index")))


def forward_case_shapes(params) -> dict:
    """cases.shapes: `shape` is the scores' [N, C, d1..dk]; labels [N, d1..dk], weights [C], ignore_index []."""
    scores = tuple(params["shape"])
    return {"scores": scores, "labels": (scores[0], *scores[2:]), "weights": (scores[1],), "ignore_index": ()}


def forward_bench_bytes(shapes, attributes):
    """scores read, log_prob written (the labels and the loss are small)."""
    return 2 * int(np.prod(shapes["scores"])) * 4


def forward_bench_torch(inputs, attributes):
    """torch's cross_entropy forward as ATen runs it: log_softmax, then nll_loss (mean over the labels not ignored)."""
    import torch

    from reference._torch import tensors

    scores, labels, _, ignore = tensors(*inputs)
    ii = int(ignore)
    return lambda: torch.nn.functional.nll_loss(torch.log_softmax(scores, 1), labels, ignore_index=ii)


def forward_from_node(node):
    """`shape` is the scores' [N, C, d1..dk]; Tind the labels' dtype when it is not int64."""
    params = {"shape": list(node.shape("scores"))}
    if node.dtypes.get("labels", "int64") != "int64":
        params["Tind"] = node.dtypes["labels"]
    return params


def ignore_minus_one_by_default(scores, labels, weights=None, ignore_index=None, *, reduction="mean", output_type=None):
    """Without the ignore_index input, label -1 ignored (the float32 kernel's attribute default), not invalid."""
    if ignore_index is None:
        ignore_index = np.asarray(-1)
    return softmax_cross_entropy_loss_internal(scores, labels, weights, ignore_index, reduction=reduction)


# ---- SoftmaxCrossEntropyLossInternalGrad --------------------------------------------------------------------------

def check_shapes(shapes, attributes) -> str | None:
    """valid_if: log_prob [N, C, d..], label [N, d..], weight [C], ignore_index [], bias log_prob's shape, dY []
    (mean, sum) or label's shape (none)."""
    problem = _grad_check_shapes(shapes, attributes) or _ignore_problem(shapes.get("ignore_index"))
    bias = shapes.get("bias")
    if problem is None and bias is not None and tuple(bias) != tuple(shapes["log_prob"]):
        problem = f"bias shape {list(bias)} != log_prob shape {list(shapes['log_prob'])}"
    return problem


def check_values(inputs, attributes) -> str | None:
    """valid_values: every label in [0, C) or equal to the ignore_index input."""
    log_prob, label = inputs.get("log_prob"), inputs.get("label")
    if log_prob is None or label is None or np.ndim(log_prob) < 2 or np.ndim(inputs.get("ignore_index", 0)) != 0:
        return None
    return label_problem(label, np.shape(log_prob)[1], ignore_value(inputs.get("ignore_index")))


def softmax_cross_entropy_loss_internal_grad(dY, log_prob, label, weight=None, ignore_index=None, bias=None, *,
                                             reduction="mean", output_type=None):
    """Return d_logits in float64."""
    shapes = {"dY": np.shape(dY), "log_prob": np.shape(log_prob), "label": np.shape(label),
              "weight": None if weight is None else np.shape(weight),
              "ignore_index": None if ignore_index is None else np.shape(ignore_index),
              "bias": None if bias is None else np.shape(bias)}
    problem = check_shapes(shapes, {"reduction": reduction})
    if problem:
        raise ValueError(problem)
    d = softmax_cross_entropy_loss_grad(dY, log_prob, label, weight, reduction=reduction,
                                        ignore_index=ignore_value(ignore_index))
    return d if bias is None else d + np.asarray(bias, dtype=np.float64)


def case_shapes(params) -> dict:
    """cases.shapes: `shape` is the scores' (and log_prob's) [N, C, d1..dk]; label [N, d1..dk], weight [C],
    ignore_index [], bias [N, C, d1..dk], dY a scalar for mean and sum (the default) and label's shape for none."""
    scores = tuple(params["shape"])
    label = (scores[0], *scores[2:])
    dY = label if params.get("reduction", "mean") == "none" else ()
    return {"scores": scores, "label": label, "weight": (scores[1],), "ignore_index": (), "bias": scores, "dY": dY}


def grad_ignore_minus_one_by_default(dY, log_prob, label, weight=None, ignore_index=None, bias=None, *,
                                     reduction="mean", output_type=None):
    """Without the ignore_index input, label -1 ignored (the float32 kernel's attribute default), not invalid."""
    if ignore_index is None:
        ignore_index = np.asarray(-1)
    return softmax_cross_entropy_loss_internal_grad(dY, log_prob, label, weight, ignore_index, bias,
                                                    reduction=reduction)


def bench_bytes(shapes, attributes):
    """log_prob read, d_logits written (the labels are small)."""
    return _grad_bench_bytes(shapes, attributes)


def bench_torch(inputs, attributes):
    """ATen's cross_entropy backward, its two kernels: nll_loss_backward (mean over the labels not ignored,
    total_weight from the forward, computed outside the timing), then _log_softmax_backward_data."""
    import torch

    from reference._torch import tensors

    dy, log_prob, label, _, ignore = tensors(*inputs)
    ii = int(ignore)
    total = (label != ii).sum().to(torch.float32)
    aten = torch.ops.aten
    return lambda: aten._log_softmax_backward_data(
        aten.nll_loss_backward(dy, log_prob, label, None, 1, ii, total), log_prob, 1, torch.float32)


def from_node(node):
    """`shape` is log_prob's [N, C, d1..dk]; Tind the label's dtype when it is not int64."""
    params = {"shape": list(node.shape("log_prob"))}
    if node.dtypes.get("label", "int64") != "int64":
        params["Tind"] = node.dtypes["label"]
    return params
