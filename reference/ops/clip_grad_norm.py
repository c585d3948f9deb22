"""InplaceClipGradNorm (com.microsoft): scale a sequence (list) of gradients so that their joint L2 norm is at most
max_norm, as torch.nn.utils.clip_grad_norm_(grads, max_norm, norm_type=2.0) does:

    total = sqrt(sum over every tensor and element of g^2)      (the Frobenius norm of the concatenation)
    coef  = min(max_norm / (total + 1e-6), 1)
    g    <- g * coef                                             for every tensor

norm_type must be "fro" (the only norm the schema names). An empty list is valid (nothing to clip). The gradients
may have any shapes. float64 arithmetic. In a training graph the clipped gradients feed the optimizer's gradients
input of the same step (no state of its own).
"""
from __future__ import annotations

import numpy as np

from reference.ops.adamw import bert_base_shapes

EPSILON = 1e-6


def clip_grad_norm(gradients, *, max_norm=1.0, norm_type="fro"):
    """Return clipped_gradients, a list in float64."""
    if gradients is None or isinstance(gradients, np.ndarray):
        raise ValueError("gradients must be a sequence (list) of tensors")
    if norm_type != "fro":
        raise ValueError(f"norm_type {norm_type!r} is not supported: only 'fro'")
    g = [np.asarray(t, dtype=np.float64) for t in gradients]
    total = float(np.sqrt(sum(float(np.sum(t * t)) for t in g))) if g else 0.0
    with np.errstate(all="ignore"):
        coef = min(float(max_norm) / (total + EPSILON), 1.0)
        return [t * coef for t in g]


def total_norm(gradients):
    """The joint L2 norm (for tests and diagnostics)."""
    return float(np.sqrt(sum(float(np.sum(np.asarray(t, np.float64) ** 2)) for t in gradients)))


def from_node(node):
    """The gradients' shapes."""
    return {"shape": [list(s) for s in node.shape("gradients")]}


def bench_bytes(shapes, attributes):
    """the gradients read twice (the norm, then the scaling) and written once: 3 float32 values an element."""
    return 3 * 4 * sum(int(np.prod(s, dtype=np.int64)) for s in shapes["gradients"])


def bench_torch(inputs, attributes):
    """torch.nn.utils.clip_grad_norm_(foreach=True) over the whole list, in place."""
    import torch

    from reference._torch import tensors

    params = [torch.nn.Parameter(t.clone()) for t in tensors(*inputs[0])]
    for p, g in zip(params, tensors(*inputs[0])):
        p.grad = g.clone()
    return lambda: torch.nn.utils.clip_grad_norm_(params, float(attributes["max_norm"]), foreach=True)


def norm_length(gradients, *, max_norm, norm_type):
    """accuracy.reduction_length: the norm sums a square for every value of the list."""
    return max(1, sum(int(np.size(t)) for t in gradients))


def gradient_list(params):
    """cases.shapes: `bert_layers: N` gives gradients BERT-base's parameter list with N layers."""
    return {"gradients": bert_base_shapes(int(params["bert_layers"]))} if "bert_layers" in params else {}
