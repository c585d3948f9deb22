"""SparseSoftmaxCrossEntropy (ONNX domain, since 9; ORT's legacy loss with class indices): a forward computation
ORT runs as a kernel. Its math is reference.forward.sparse_softmax_cross_entropy_grad (the forward op of
SparseSoftmaxCrossEntropyGrad); tests/test_sce_legacy.py proves it against onnx's SoftmaxCrossEntropyLoss.
"""
import numpy as np

from reference.forward.softmax_cross_entropy_grad import reduction_problem
from reference.forward.sparse_softmax_cross_entropy_grad import label_problem, shape_problem
from reference.forward.sparse_softmax_cross_entropy_grad import sparse_softmax_cross_entropy as _forward


def sparse_softmax_cross_entropy(logits, label, weight=None, *, reduction="mean"):
    """Return (Y, log_prob) in float64."""
    return _forward(logits, label, weight, reduction=reduction)


def check_shapes(shapes, attributes) -> str | None:
    """valid_if hook: logits [..., C], label logits' shape without C, weight label's shape; reduction known."""
    return (shape_problem(shapes["logits"], shapes["label"], shapes.get("weight"))
            or reduction_problem(attributes.get("reduction", "mean")))


def check_values(inputs, attributes) -> str | None:
    """valid_values hook: every label in [0, C)."""
    logits, label = inputs.get("logits"), inputs.get("label")
    if logits is None or label is None or np.ndim(logits) < 1:
        return None
    return label_problem(label, np.shape(logits)[-1])


def loss_shape(shapes, attributes):
    """Y: label's shape for reduction none, else a scalar."""
    return list(shapes["label"]) if attributes.get("reduction", "mean") == "none" else []


def case_shapes(params) -> dict:
    """cases.shapes hook: `shape` is logits' [..., C]; label and weight its shape without C."""
    shape = tuple(params["shape"])
    return {"logits": shape, "label": shape[:-1], "weight": shape[:-1]}


def reduction_length(logits, label, weight=None, *, reduction="mean"):
    """accuracy: Y sums one term per label; log_prob sums C exponentials per row."""
    return (max(int(np.size(label)), 1), max(int(np.shape(logits)[-1]), 1))


# ---- plausible wrong semantics -----------------------------------------------------------------------------

def none_as_sum(logits, label, weight=None, *, reduction="mean"):
    """reduction none written as the scalar sum (ORT's float32 kernel)."""
    return _forward(logits, label, weight, reduction="sum" if reduction == "none" else reduction)


# ---- bench ---------------------------------------------------------------------------------------------------

def bench_bytes(shapes, attributes):
    """logits read, log_prob written (float32; the labels are small)."""
    return 2 * int(np.prod(shapes["logits"], dtype=np.int64)) * 4


def bench_torch(inputs, attributes):
    """torch.nn.functional.cross_entropy with class indices (log_softmax, then nll_loss)."""
    import torch.nn.functional as F

    from reference._torch import tensors

    x, label, _ = tensors(*inputs)
    red = attributes.get("reduction", "mean")
    return lambda: F.cross_entropy(x.view(-1, x.shape[-1]), label.view(-1), reduction=red)


# ---- model: a real graph's node -> case params -----------------------------------------------------------------

def from_node(node):
    """`shape` is logits' [..., C]; Tind the label's dtype when it is not int64."""
    params = {"shape": list(node.shape("logits"))}
    if node.dtypes.get("label", "int64") != "int64":
        params["Tind"] = node.dtypes["label"]
    return params
