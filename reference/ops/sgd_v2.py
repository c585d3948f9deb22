"""SGDOptimizerV2 (com.microsoft): one plain SGD step over a sequence (list) of parameter tensors.

    w <- w - lr * g        for every (w, g) pair of the lists

(torch.optim.SGD with momentum 0, dampening 0, weight_decay 0, nesterov False). With update_signal present and false
nothing is updated: updated_weights are the weights and update_completed is false. At the next step
updated_weights -> weights. The lists must have equal lengths (>= 1) and matching shapes; float64 arithmetic.
"""
from __future__ import annotations

import numpy as np

from reference.ops.adamw import _as_list, bert_base_shapes, check_lists


def sgd_v2(lr, weights, gradients, update_signal=None):
    """Return (update_completed, updated_weights), the list in float64; update_completed has lr's shape."""
    w = _as_list("weights", weights)
    g = _as_list("gradients", gradients)
    check_lists([("weights", w), ("gradients", g)])
    if np.asarray(lr).size != 1:
        raise ValueError("lr must hold one value")
    shape = np.asarray(lr).shape
    if update_signal is not None and not bool(np.asarray(update_signal).reshape(-1)[0]):
        return np.zeros(shape, dtype=bool), w
    s = float(np.asarray(lr).reshape(-1)[0])
    with np.errstate(all="ignore"):
        return np.ones(shape, dtype=bool), [wi - s * gi for wi, gi in zip(w, g)]


def sgd_v2_check(shapes, attributes):
    """valid_if: a parameter list of at least one tensor (gradients follow its shapes: shape_from)."""
    return "weights is an empty sequence; at least one tensor is required" if shapes.get("weights") == () else None


def from_node(node):
    """The parameter list's shapes (gradients have them too)."""
    return {"shape": [list(s) for s in node.shape("weights")]}


def bench_bytes(shapes, attributes):
    """weights and gradients read, updated weights written: 3 float32 values an element."""
    return 3 * 4 * sum(int(np.prod(s, dtype=np.int64)) for s in shapes["weights"])


def bench_torch(inputs, attributes):
    """torch.optim.SGD(foreach=True) over the whole list (momentum 0)."""
    import torch

    from reference._torch import tensors

    params = [torch.nn.Parameter(t.clone()) for t in tensors(*inputs[1])]
    for p, g in zip(params, tensors(*inputs[2])):
        p.grad = g.clone()
    return torch.optim.SGD(params, lr=float(np.asarray(inputs[0]).reshape(-1)[0]), foreach=True).step


def parameter_list(params):
    """cases.shapes: `bert_layers: N` gives weights BERT-base's parameter list with N layers (adamw.bert_base_shapes)."""
    return {"weights": bert_base_shapes(int(params["bert_layers"]))} if "bert_layers" in params else {}
