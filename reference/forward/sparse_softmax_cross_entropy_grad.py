"""Forward SparseSoftmaxCrossEntropy (ONNX domain, since 9; ORT's legacy loss with class indices).

logits [d0..dk-1, C] (the class axis is the LAST), label [d0..dk-1] with every value in [0, C) (no ignore
index), optional weight [d0..dk-1]: one weight PER ELEMENT (not per class), w_i = 1 without weight:
    log_prob = log_softmax(logits, axis=-1)
    l_i = -log_prob[i, label_i] * w_i
    none: l (label's shape);  sum: sum_i l_i;  mean: sum_i l_i / sum_i w_i  (/ n without weight; 0/0 = NaN)
"""
import numpy as np

from reference.forward.softmax_cross_entropy_grad import log_softmax_last, reduction_problem


def shape_problem(logits_shape, label_shape, weight_shape=None) -> str | None:
    if len(logits_shape) < 1:
        return f"logits must have rank >= 1 ([..., C]), got shape {list(logits_shape)}"
    if tuple(label_shape) != tuple(logits_shape[:-1]):
        return f"label shape {list(label_shape)} != logits shape without its last (class) axis {list(logits_shape[:-1])}"
    if weight_shape is not None and tuple(weight_shape) != tuple(label_shape):
        return f"weight shape {list(weight_shape)} != label shape {list(label_shape)}"
    return None


def label_problem(label, classes: int) -> str | None:
    label = np.asarray(label)
    bad = (label < 0) | (label >= classes)
    if bad.any():
        return f"label {int(label[bad].ravel()[0])} is outside [0, {classes})"
    return None


def sparse_softmax_cross_entropy(logits, label, weight=None, *, reduction="mean"):
    """Return (Y, log_prob) in float64."""
    x = np.asarray(logits, dtype=np.float64)
    problem = (shape_problem(x.shape, np.shape(label), None if weight is None else np.shape(weight))
               or reduction_problem(reduction))
    problem = problem or label_problem(label, x.shape[-1])
    if problem:
        raise ValueError(problem)
    log_prob = log_softmax_last(x)
    lab = np.asarray(label).astype(np.int64)
    w = np.ones(lab.shape) if weight is None else np.asarray(weight, dtype=np.float64)
    picked = np.take_along_axis(log_prob, lab[..., None], axis=-1)[..., 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = -picked * w
        if reduction == "none":
            return loss, log_prob
        total = np.sum(loss)
        if reduction == "sum":
            return np.asarray(total), log_prob
        return np.asarray(total / np.sum(w)), log_prob
