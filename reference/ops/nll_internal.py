"""NegativeLogLikelihoodLossInternal2 and NegativeLogLikelihoodLossInternal (com.microsoft, one contract): ai.onnx
NegativeLogLikelihoodLoss with ignore_index an optional int64 scalar INPUT instead of an attribute (absent: no target
is ignored). Internal2 is what ORT's SoftmaxCrossEntropyLossInternal function body calls (opset 13 and later);
NegativeLogLikelihoodLossInternal, what ORTModule writes for torch's nll_loss, is the same op whose function body is
written for ai.onnx opset 12.

input [N, C, d1..dk] (log-probabilities, class axis 1), target [N, d1..dk] in [0, C) or equal to ignore_index,
optional weight [C]. With w_i = weight[target_i] (1 without weight), 0 for an ignored element:
    l_i = -input[i, target_i] * w_i     (exactly 0 when ignored: selected, not multiplied)
    none: l;  sum: sum(l);  mean: sum(l) / sum(w_i)   (0/0 = NaN when every element is ignored or the weights sum to 0)
"""
import numpy as np

from reference.forward.softmax_cross_entropy import label_problem, per_element, shape_problem
from reference.forward.softmax_cross_entropy_internal import ignore_value


def check_shapes(shapes, attributes) -> str | None:
    """valid_if: input [N, C, d..], target [N, d..], weight [C], ignore_index []."""
    problem = shape_problem(shapes["input"], shapes["target"], shapes.get("weight"))
    if problem:
        return problem.replace("scores", "input").replace("labels", "target").replace("weights", "weight")
    ii = shapes.get("ignore_index")
    if ii is not None and tuple(ii) != ():
        return f"ignore_index must be a scalar, got shape {list(ii)}"
    return None


def check_values(inputs, attributes) -> str | None:
    """valid_values: every target in [0, C) or equal to the ignore_index input."""
    x, target = inputs.get("input"), inputs.get("target")
    if x is None or target is None or np.ndim(x) < 2 or np.ndim(inputs.get("ignore_index", 0)) != 0:
        return None
    return label_problem(target, np.shape(x)[1], ignore_value(inputs.get("ignore_index")))


def nll_loss_internal(input, target, weight=None, ignore_index=None, *, reduction="mean"):
    """Return the loss in float64."""
    x = np.asarray(input, dtype=np.float64)
    shapes = {"input": x.shape, "target": np.shape(target), "weight": None if weight is None else np.shape(weight),
              "ignore_index": None if ignore_index is None else np.shape(ignore_index)}
    ii = None
    problem = check_shapes(shapes, {})
    if problem is None:
        ii = ignore_value(ignore_index)
        problem = label_problem(target, x.shape[1], ii)
    if problem:
        raise ValueError(problem)
    ignored, safe, w = per_element(target, x.shape[1], weight, ii)
    picked = np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = np.where(ignored, 0.0, -picked * w)
        if reduction == "none":
            return loss
        if reduction == "sum":
            return np.asarray(np.sum(loss))
        return np.asarray(np.sum(loss) / np.sum(w))


def target_minus_one_wraps(input, target, weight=None, ignore_index=None, *, reduction="mean"):
    """Without ignore_index, a target -1 read as class C-1 (GatherElements' negative index), not rejected."""
    x = np.asarray(input, dtype=np.float64)
    t = np.asarray(target).astype(np.int64)
    t = np.where(t < 0, t + x.shape[1], t)
    return nll_loss_internal(x, t, weight, ignore_index, reduction=reduction)


def case_shapes(params) -> dict:
    """cases.shapes: `shape` is input's [N, C, d1..dk]; target [N, d1..dk], weight [C], ignore_index []."""
    x = tuple(params["shape"])
    return {"input": x, "target": (x[0], *x[2:]), "weight": (x[1],), "ignore_index": ()}


def bench_bytes(shapes, attributes):
    """Per element: the target read and the one input value it selects (a gather: the rest of the row is never
    read); the loss is small unless reduction none (written, the size of the target)."""
    m = int(np.prod(shapes["target"]))
    out = m * 4 if attributes.get("reduction", "mean") == "none" else 0
    return m * (8 + 4) + out


def bench_torch(inputs, attributes):
    """torch's nll_loss (ATen's nll_loss / nll_loss2d forward), ignore_index from the input."""
    import torch

    from reference._torch import tensors

    x, target, weight, ignore = tensors(*inputs)
    ii = -100 if ignore is None else int(ignore)
    reduction = attributes.get("reduction", "mean")
    return lambda: torch.nn.functional.nll_loss(x, target, weight, ignore_index=ii, reduction=reduction)


def from_node(node):
    """`shape` is input's [N, C, d1..dk]; Tind the target's dtype when it is not int64."""
    params = {"shape": list(node.shape("input"))}
    if node.dtypes.get("target", "int64") != "int64":
        params["Tind"] = node.dtypes["target"]
    return params
