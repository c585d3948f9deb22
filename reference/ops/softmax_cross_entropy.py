"""SoftmaxCrossEntropy (com.microsoft, ORT's legacy loss with a dense label): a forward computation ORT runs as a
kernel. Its math is reference.forward.softmax_cross_entropy_grad (the forward op of SoftmaxCrossEntropyGrad);
tests/test_sce_legacy.py proves it against onnx's SoftmaxCrossEntropyLoss (the loss is linear in the label).
"""
import numpy as np

from reference.forward.softmax_cross_entropy_grad import reduction_problem, shape_problem
from reference.forward.softmax_cross_entropy_grad import softmax_cross_entropy as _forward


def softmax_cross_entropy(logits, label, *, reduction="mean"):
    """Return (Y, log_prob) in float64."""
    return _forward(logits, label, reduction=reduction)


def check_shapes(shapes, attributes) -> str | None:
    """valid_if hook: label has logits' shape (rank >= 1); reduction none, sum or mean."""
    return shape_problem(shapes["logits"], shapes["label"]) or reduction_problem(attributes.get("reduction", "mean"))


def loss_shape(shapes, attributes):
    """Y: logits' shape without its last axis for reduction none, else a scalar."""
    return list(shapes["logits"][:-1]) if attributes.get("reduction", "mean") == "none" else []


def case_shapes(params) -> dict:
    """cases.shapes hook: `shape` is logits' (and label's)."""
    return {"logits": tuple(params["shape"]), "label": tuple(params["shape"])}


def reduction_length(logits, label, *, reduction="mean"):
    """accuracy: Y sums every element's label * log_prob; log_prob sums C exponentials per row."""
    return (max(int(np.size(logits)), 1), max(int(np.shape(logits)[-1]), 1))


# ---- plausible wrong semantics -----------------------------------------------------------------------------

def none_as_signed_sum(logits, label, *, reduction="mean"):
    """reduction none written as the scalar sum(label * log_prob), unnegated (ORT's float32 kernel)."""
    y, lp = _forward(logits, label, reduction="sum")
    return (-y if reduction == "none" else _forward(logits, label, reduction=reduction)[0]), lp


# ---- bench ---------------------------------------------------------------------------------------------------

def bench_bytes(shapes, attributes):
    """logits and label read, log_prob written (float32)."""
    return 3 * int(np.prod(shapes["logits"], dtype=np.int64)) * 4


def bench_torch(inputs, attributes):
    """torch.nn.functional.cross_entropy with probability targets (its log_softmax and the weighted sum)."""
    import torch.nn.functional as F

    from reference._torch import tensors

    x, y = tensors(*inputs)
    red = attributes.get("reduction", "mean")
    return lambda: F.cross_entropy(x.view(-1, x.shape[-1]), y.view(-1, y.shape[-1]), reduction=red)


# ---- model: a real graph's node -> case params -----------------------------------------------------------------

def from_node(node):
    """`shape` is logits' (label has the same shape)."""
    return {"shape": list(node.shape("logits"))}
