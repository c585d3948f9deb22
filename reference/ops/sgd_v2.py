"""SGDOptimizerV2 (com.microsoft): one plain SGD step over a sequence (list) of parameter tensors.

    w <- w - lr * g        for every (w, g) pair of the lists

(torch.optim.SGD with momentum 0, dampening 0, weight_decay 0, nesterov False). With update_signal present and false
nothing is updated: updated_weights are the weights and update_completed is false. At the next step
updated_weights -> weights. The lists must have equal lengths (>= 1) and matching shapes; float64 arithmetic.
"""
from __future__ import annotations

import numpy as np

from reference.ops.adamw import _as_list, check_lists


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
